// The identity components: Router Identity Info (draft 5.6.3, in an I_SEE_YOU), Web-Cache Identity Info (5.6.4, in a
// HERE_I_AM) and Router Query Info (5.6.8, in a REMOVAL_QUERY: the router asking after one web cache).
import type { Reader } from '../bytes.js';
import { ComponentType, MAX_CACHES } from '../constants.js';
import { webCacheText } from '../text.js';
import type { RouterIdentityInfo, RouterQueryInfo, WebCacheIdentityInfo } from '../types.js';
import type { ComponentDefs } from './definition.js';
import { ipv4List, putIpv4List, putWebCacheElement, routerIdElement, webCacheIdentityElement } from './elements.js';

function routerIdentity(r: Reader): RouterIdentityInfo {
  return {
    kind: 'router-identity',
    router: routerIdElement(r),
    sentTo: r.ipv4('Sent To Address'),
    receivedFrom: ipv4List(r, 'Number Received From', MAX_CACHES, 'too-many-caches'),
  };
}

function webCacheIdentity(r: Reader): WebCacheIdentityInfo {
  return { kind: 'web-cache-identity', element: webCacheIdentityElement(r, true) };
}

function routerQuery(r: Reader): RouterQueryInfo {
  return {
    kind: 'router-query',
    routerId: r.ipv4('Router ID'),
    receiveId: r.u32('Receive ID'),
    sentTo: r.ipv4('Sent To IP'),
    target: r.ipv4('Target IP'),
  };
}

export const IDENTITY_COMPONENTS: ComponentDefs<'router-identity' | 'web-cache-identity' | 'router-query'> = {
  'router-identity': {
    type: ComponentType.ROUTER_ID_INFO,
    decode: routerIdentity,
    encode(c, w) {
      w.ipv4(c.router.routerId, 'Router ID');
      w.u32(c.router.receiveId, 'Receive ID');
      w.ipv4(c.sentTo, 'Sent To Address');
      putIpv4List(w, c.receivedFrom, MAX_CACHES, 'Number Received From');
    },
    describe: (c) => [
      `router ${c.router.routerId} receive_id=${c.router.receiveId}, sent_to=${c.sentTo},` +
        ` received_from=[${c.receivedFrom.join(', ')}]`,
    ],
  },
  'web-cache-identity': {
    type: ComponentType.WC_ID_INFO,
    decode: webCacheIdentity,
    encode: (c, w) => putWebCacheElement(w, c.element),
    describe: (c) => webCacheText(c.element, ''),
  },
  'router-query': {
    type: ComponentType.QUERY_INFO,
    decode: routerQuery,
    encode(c, w) {
      w.ipv4(c.routerId, 'Router ID');
      w.u32(c.receiveId, 'Receive ID');
      w.ipv4(c.sentTo, 'Sent To IP');
      w.ipv4(c.target, 'Target IP');
    },
    describe: (c) => [`router ${c.routerId} receive_id=${c.receiveId}, sent_to=${c.sentTo}, target=${c.target}`],
  },
};
