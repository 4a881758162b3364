// The view components: Router View Info (draft 5.6.5, a router's view of the group in an I_SEE_YOU: its member change
// number, the Assignment Key, the routers and every web cache's identity) and Web-Cache View Info (5.6.6, a web
// cache's in a HERE_I_AM: the routers it hears and the caches it knows).
import { Wccp2EncodeError, type Reader } from '../bytes.js';
import { ComponentType, MAX_CACHES, MAX_ROUTERS } from '../constants.js';
import { webCacheText } from '../text.js';
import type { RouterIdElement, RouterViewInfo, WebCacheIdentityElement, WebCacheViewInfo } from '../types.js';
import type { ComponentDefs } from './definition.js';
import {
  assignmentKey,
  ipv4List,
  limit,
  putIpv4List,
  putKey,
  putWebCacheElement,
  routerIdElement,
  webCacheIdentityElement,
} from './elements.js';

function routerView(r: Reader): RouterViewInfo {
  const memberChangeNumber = r.u32('Member Change Number');
  const key = assignmentKey(r);
  const routers = ipv4List(r, 'Number of Routers', MAX_ROUTERS, 'too-many-routers');
  // Smallest Web-Cache Identity Element: 12 bytes + 4 (mask, no sets) = 16.
  const n = r.count('Number of Web-Caches', 16, MAX_CACHES, 'too-many-caches');
  const caches: WebCacheIdentityElement[] = [];
  for (let i = 0; i < n; i++) caches.push(webCacheIdentityElement(r, false));
  return { kind: 'router-view', memberChangeNumber, assignmentKey: key, routers, caches };
}

function webCacheView(r: Reader): WebCacheViewInfo {
  const changeNumber = r.u32('Change Number');
  const nr = r.count('Number of Routers', 8, MAX_ROUTERS, 'too-many-routers');
  const routers: RouterIdElement[] = [];
  for (let i = 0; i < nr; i++) routers.push(routerIdElement(r));
  return {
    kind: 'web-cache-view',
    changeNumber,
    routers,
    caches: ipv4List(r, 'Number of Web-Caches', MAX_CACHES, 'too-many-caches'),
  };
}

export const VIEW_COMPONENTS: ComponentDefs<'router-view' | 'web-cache-view'> = {
  'router-view': {
    type: ComponentType.RTR_VIEW_INFO,
    decode: routerView,
    encode(c, w) {
      w.u32(c.memberChangeNumber, 'Member Change Number');
      putKey(w, c.assignmentKey);
      putIpv4List(w, c.routers, MAX_ROUTERS, 'Number of Routers');
      limit(c.caches.length, MAX_CACHES, 'Number of Web-Caches');
      w.u32(c.caches.length, 'Number of Web-Caches');
      for (const e of c.caches) {
        if (e.assignment.type === 'other') {
          throw new Wccp2EncodeError('Router View', 'a web cache with assignment data type 2/3 cannot be in a view');
        }
        putWebCacheElement(w, e);
      }
    },
    describe: (c) => [
      `member change number=${c.memberChangeNumber},` +
        ` key ${c.assignmentKey.address}/${c.assignmentKey.changeNumber},` +
        ` ${c.routers.length} routers [${c.routers.join(', ')}], ${c.caches.length} caches`,
      ...c.caches.flatMap((e) => webCacheText(e, '  ')),
    ],
  },
  'web-cache-view': {
    type: ComponentType.WC_VIEW_INFO,
    decode: webCacheView,
    encode(c, w) {
      w.u32(c.changeNumber, 'Change Number');
      limit(c.routers.length, MAX_ROUTERS, 'Number of Routers');
      w.u32(c.routers.length, 'Number of Routers');
      for (const r of c.routers) {
        w.ipv4(r.routerId, 'Router ID');
        w.u32(r.receiveId, 'Receive ID');
      }
      putIpv4List(w, c.caches, MAX_CACHES, 'Number of Web-Caches');
    },
    describe: (c) => [
      `change number=${c.changeNumber}, ${c.routers.length} routers` +
        ` [${c.routers.map((r) => `{${r.routerId}, received_id ${r.receiveId}}`).join(', ')}],` +
        ` ${c.caches.length} caches [${c.caches.join(', ')}]`,
    ],
  },
};
