// An OpenAI list object (`{object: "list", data, has_more, …}`) written a page of rows at a time, so a large `limit` never holds the whole reply.
import type { Ctx } from '../../server/context.js';

/** Rows read and rendered at a time: the most of a list held in memory at once. */
export const LIST_PAGE = 20;

export interface ListSource<T> {
  /** Rows per read (default LIST_PAGE): larger for small rows. */
  page?: number;
  /** Up to `n` + 1 rows after `after` (the extra one says there are more). */
  rows(after: string | undefined, n: number): Promise<T[]>;
  id(row: T): string;
  render(row: T): unknown;
  /** The fields after `data`, from the first and last ids written and whether more rows follow. */
  tail(first: string | null, last: string | null, more: boolean): Record<string, unknown>;
}

/**
 * Answers a list a page at a time, each written when the client has taken the one before. The first
 * page is read before anything is sent (a store error is still an error reply); a later page that
 * cannot be read drops the connection, since the reply has begun.
 */
export async function streamList<T>(ctx: Ctx, limit: number, after: string | undefined, src: ListSource<T>): Promise<void> {
  const size = src.page ?? LIST_PAGE;
  let rows = await src.rows(after, Math.min(size, limit));
  ctx.begin(200, { 'content-type': 'application/json' });
  let remaining = limit;
  let first: string | null = null;
  let last: string | null = null;
  let more: boolean;
  let sep = '';
  try {
    await write(ctx, '{"object":"list","data":[');
    for (;;) {
      const n = Math.min(size, remaining);
      const page = rows.slice(0, n);
      for (const r of page) {
        if (!ctx.live) return;
        await write(ctx, sep + JSON.stringify(src.render(r)));
        sep = ',';
        first ??= src.id(r);
        last = src.id(r);
      }
      remaining -= page.length;
      more = rows.length > n;
      if (!more || remaining === 0) break;
      rows = await src.rows(last ?? undefined, Math.min(size, remaining));
    }
  } catch {
    ctx.close();
    return;
  }
  const tail = JSON.stringify(src.tail(first, last, more));
  ctx.end(`]${tail === '{}' ? '' : `,${tail.slice(1, -1)}`}}`);
}

async function write(ctx: Ctx, chunk: string): Promise<void> {
  const wait = ctx.write(chunk);
  if (wait) await wait;
}
