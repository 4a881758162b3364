// The settings page.ts hands to the page's script (page/app.js) in the page's `page-config` JSON element.

export interface PageConfig {
  /** Engine colours, in the order the API lists engines (sorted by address). */
  readonly colours: readonly string[];
  readonly unassigned: string;
  readonly sampleMs: number;
  readonly chartWindowMs: number;
  readonly shadeWindowMs: number;
  readonly shadeMin: number;
}
