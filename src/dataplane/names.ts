// The kernel names the nft backend owns. Fixed, so the systemd cleanup script and admins can find and remove them:
// table `inet wccpd`; per engine slot s (1..255): fwmark 0x100+s, `ip rule` priority 10000+s, routing table 100+s,
// and for GRE forwarding a tunnel device `wccpd-gre<s>`.

export const NFT_FAMILY = 'inet';
export const NFT_TABLE = 'wccpd';
export const MIN_SLOT = 1;
export const MAX_SLOT = 255;

export const engineMark = (slot: number): number => 0x100 + slot;
export const rulePriority = (slot: number): number => 10000 + slot;
export const routeTable = (slot: number): number => 100 + slot;
export const greDevice = (slot: number): string => `wccpd-gre${slot}`;

export const isOurRulePriority = (p: number): boolean => p >= rulePriority(MIN_SLOT) && p <= rulePriority(MAX_SLOT);
export const isOurRouteTable = (t: number): boolean => t >= routeTable(MIN_SLOT) && t <= routeTable(MAX_SLOT);
