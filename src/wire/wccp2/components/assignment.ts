// The assignment components: Assignment Info (draft 5.6.7, a hash assignment in a REDIRECT_ASSIGN), Alternate
// Assignment (5.6.10, a hash or mask assignment behind its own type and length) and Assignment Map (5.6.11, the
// Mask/Value Sets of a mask assignment).
import type { Reader } from '../bytes.js';
import { AssignmentMethod, ComponentType } from '../constants.js';
import { bucketTableText, setsText } from '../text.js';
import type { AlternateAssignment, AssignmentInfo, AssignmentMap } from '../types.js';
import type { ComponentDefs } from './definition.js';
import {
  hashAssignment,
  maskAssignment,
  maskValueSets,
  putHashAssignment,
  putKey,
  putRouterAssignments,
  putSets,
  putSubBody,
  subBody,
} from './elements.js';

function assignmentInfo(r: Reader): AssignmentInfo {
  return { kind: 'assignment-info', ...hashAssignment(r) };
}

function alternateAssignment(r: Reader): AlternateAssignment {
  const assignmentType = r.u16('Assignment Type');
  const length = r.u16('Assignment Length');
  const assignment = subBody(r, length, 'Assignment Body', (sub): AlternateAssignment['assignment'] => {
    if (assignmentType === AssignmentMethod.HASH) return { type: 'hash', ...hashAssignment(sub) };
    if (assignmentType === AssignmentMethod.MASK) return { type: 'mask', ...maskAssignment(sub) };
    return { type: 'other', assignmentType, data: sub.hex(sub.remaining, 'Assignment Body') };
  });
  return { kind: 'alternate-assignment', assignment };
}

function assignmentMap(r: Reader): AssignmentMap {
  return { kind: 'assignment-map', sets: maskValueSets(r) };
}

export const ASSIGNMENT_COMPONENTS: ComponentDefs<'assignment-info' | 'alternate-assignment' | 'assignment-map'> = {
  'assignment-info': {
    type: ComponentType.REDIRECT_ASSIGNMENT,
    decode: assignmentInfo,
    encode: (c, w) => putHashAssignment(w, c),
    describe: (c) => [
      `key ${c.key.address}/${c.key.changeNumber}, routers ` +
        `[${c.routers.map((r) => `{${r.routerId} receive_id ${r.receiveId} change ${r.changeNumber}}`).join(', ')}],` +
        ` caches [${c.caches.join(', ')}]`,
      ...bucketTableText(c.caches, c.buckets, '  '),
    ],
  },
  'alternate-assignment': {
    type: ComponentType.ALT_ASSIGNMENT,
    decode: alternateAssignment,
    encode(c, w) {
      const a = c.assignment;
      w.u16(
        a.type === 'hash' ? AssignmentMethod.HASH : a.type === 'mask' ? AssignmentMethod.MASK : a.assignmentType,
        'Assignment Type',
      );
      putSubBody(w, 'Assignment Length', (sub) => {
        if (a.type === 'hash') putHashAssignment(sub, a);
        else if (a.type === 'mask') {
          putKey(sub, a.key);
          putRouterAssignments(sub, a.routers);
          putSets(sub, a.sets);
        } else sub.hex(a.data, 'Assignment Body');
      });
    },
    describe(c) {
      const a = c.assignment;
      if (a.type === 'hash') {
        return [
          `hash: key ${a.key.address}/${a.key.changeNumber}, caches [${a.caches.join(', ')}]`,
          ...bucketTableText(a.caches, a.buckets, '  '),
        ];
      }
      if (a.type === 'mask') return [`mask: key ${a.key.address}/${a.key.changeNumber}`, ...setsText(a.sets, '  ')];
      return [`assignment type ${a.assignmentType}: 0x${a.data}`];
    },
  },
  'assignment-map': {
    type: ComponentType.ASSIGN_MAP,
    decode: assignmentMap,
    encode: (c, w) => putSets(w, c.sets),
    describe: (c) => [`${c.sets.length} mask/value sets`, ...setsText(c.sets, '  ')],
  },
};
