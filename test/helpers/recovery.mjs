// After a killed gateway is recovered: what a Redis key still holds, and the account's ledger as PostgreSQL has it.
import pg from '../../node_modules/pg/lib/index.js';

/** How many entries a Redis key of any type holds (an absent key: none). */
export async function redisLen(redis, key) {
  switch (await redis.type(key)) {
    case 'none': return 0;
    case 'hash': return redis.hlen(key);
    case 'zset': return redis.zcard(key);
    case 'set': return redis.scard(key);
    case 'list': return redis.llen(key);
    case 'stream': return redis.xlen(key);
    default: return 1;
  }
}

/** The account's debits (by ledger key), its balance and the sum of its ledger, read from the database at `url`. */
export async function ledgerOf(url, account) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const debits = (await c.query(`SELECT idem_key, amount_nd::text AS amount, usage FROM ledger WHERE account_id = $1 AND kind = 'debit' ORDER BY idem_key`, [account])).rows;
    const balance = BigInt((await c.query('SELECT balance_nd::text AS b FROM accounts WHERE id = $1', [account])).rows[0].b);
    const total = BigInt((await c.query('SELECT coalesce(sum(amount_nd), 0)::text AS s FROM ledger WHERE account_id = $1', [account])).rows[0].s);
    return { debits, balance, total };
  } finally {
    await c.end();
  }
}
