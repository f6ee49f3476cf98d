// A request's receipt, built from its ledger entries (or its unbilled record), in canonical JSON, signed with Ed25519.
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from 'node:crypto';
import { nanoToDecimal, nanoToFixed9 } from '../money.js';
import type { ReceiptEntry } from '../store/receipts.js';
import type { UnitPrices } from './pricing.js';

export type Outcome = 'complete' | 'client_dropped' | 'interrupted' | 'failed';

/** JSON without floats: strings, whole numbers, booleans, null, arrays and objects. */
export type Canon = string | number | boolean | null | Canon[] | { [k: string]: Canon };

/**
 * The bytes a receipt's signature covers: RFC 8785 (JCS) for the values a receipt holds — object keys
 * sorted, no whitespace, strings as JSON.stringify writes them, whole numbers only (money and seconds are
 * strings) — encoded as UTF-8. Python writes the same bytes with
 * `json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()`.
 */
export function canonicalJson(v: Canon): string {
  if (v === null || typeof v === 'boolean' || typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v)) throw new RangeError(`a receipt holds whole numbers only: ${v}`);
    return String(v);
  }
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k]!)}`).join(',')}}`;
}

/** The units a ledger entry records (its `usage`), whole: tokens, characters, audio in milliseconds. */
export function unitsOf(usage: Record<string, unknown>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of ['input_tokens', 'output_tokens', 'reasoning_tokens', 'characters', 'audio_input_tokens', 'audio_output_tokens', 'cached_input_tokens']) {
    const v = usage[k];
    if (typeof v === 'number' && v > 0) out[k] = v;
  }
  for (const [k, ms] of [['audio_seconds_in', 'audio_in_ms'], ['audio_seconds_out', 'audio_out_ms']] as const) {
    const v = usage[k];
    if (typeof v === 'number' && v > 0) out[ms] = Math.round(v * 1000);
  }
  return out;
}

/** How a billed entry ended: the client left, the stream broke off (billed what was produced), or whole. */
export function outcomeOf(usage: Record<string, unknown>): Outcome {
  if (usage.client_dropped === true) return 'client_dropped';
  return usage.basis === 'partial' ? 'interrupted' : 'complete';
}

function part(e: ReceiptEntry): { [k: string]: Canon } {
  const hash = e.idemKey.lastIndexOf('#');
  const seq = hash >= 0 ? /^#(\d+)/.exec(e.idemKey.slice(hash)) : null;
  const prices = e.usage.prices;
  return {
    ledger_key: e.idemKey, ...(seq ? { seq: Number(seq[1]) } : {}), route: e.reason, model: e.model,
    units: unitsOf(e.usage), basis: typeof e.usage.basis === 'string' ? e.usage.basis : 'exact',
    unit_prices: prices && typeof prices === 'object' ? prices as { [k: string]: Canon } : {},
    cost: nanoToFixed9(e.amount), outcome: outcomeOf(e.usage), settled_at: e.at.toISOString(),
  };
}

export interface ReceiptHead { requestId: string; accountId: string }

/**
 * A billed request's receipt: one entry is the request; several (a session's parts, a reused id) are
 * listed in `parts`, with the units and cost summed.
 */
export function billedReceipt(h: ReceiptHead, entries: ReceiptEntry[]): { [k: string]: Canon } {
  const parts = entries.map(part);
  const first = parts[0]!;
  const total = entries.reduce((a, e) => a + e.amount, 0n);
  const units: Record<string, number> = {};
  for (const p of parts) for (const [k, v] of Object.entries(p.units as Record<string, number>)) units[k] = (units[k] ?? 0) + v;
  const started = entries.map((e) => (typeof e.usage.started_at === 'string' ? e.usage.started_at : e.at.toISOString())).sort()[0]!;
  const outcomes = new Set(parts.map((p) => p.outcome));
  const r: { [k: string]: Canon } = {
    object: 'receipt', version: 1, request_id: h.requestId, account_id: h.accountId, key_prefix: entries[0]!.keyPrefix,
    route: first.route ?? null, model: first.model ?? null, units, unit_prices: first.unit_prices ?? {}, cost: nanoToFixed9(total), cost_nanodollars: total.toString(),
    outcome: (outcomes.size === 1 ? first.outcome : parts[parts.length - 1]!.outcome) ?? null,
    started_at: started, ended_at: entries[entries.length - 1]!.at.toISOString(),
  };
  if (entries.length > 1 || 'seq' in first) r.parts = parts;
  // Served by a fallback model (issue 27): `model` is the one that answered, this the one the request named.
  const from = entries[0]!.usage.fallback_from;
  if (typeof from === 'string') r.fallback_from = from;
  return r;
}

/** A receipt for an admitted request that billed nothing: free. */
export function unbilledReceipt(h: ReceiptHead, u: { keyPrefix: string | null; route: string; model: string | null; outcome: string; startedAt: Date; endedAt: Date }): { [k: string]: Canon } {
  return {
    object: 'receipt', version: 1, request_id: h.requestId, account_id: h.accountId, key_prefix: u.keyPrefix, route: u.route, model: u.model,
    units: {}, unit_prices: {}, cost: nanoToFixed9(0n), cost_nanodollars: '0', outcome: u.outcome,
    started_at: u.startedAt.toISOString(), ended_at: u.endedAt.toISOString(),
  };
}

/** Unit prices as a ledger entry records them (decimal dollars, non-zero only): per million tokens or characters, per minute of audio. */
export function pricesRecord(p: UnitPrices): Record<string, string> {
  const hit = recorded.get(p);
  if (hit) return hit;
  const names: Record<string, string> = {
    inputPerMTok: 'input_per_mtok', outputPerMTok: 'output_per_mtok', perMChar: 'per_mchar', audioInPerMinute: 'audio_in_per_minute',
    audioOutPerMinute: 'audio_out_per_minute', audioInputPerMTok: 'audio_input_per_mtok', audioOutputPerMTok: 'audio_output_per_mtok', cachedInputPerMTok: 'cached_input_per_mtok',
  };
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(p) as [string, unknown][]) if (typeof v === 'bigint' && v > 0n && names[k]) out[names[k]] = nanoToDecimal(v);
  recorded.set(p, out);
  return out;
}

/** A model's prices are one object for its life: their record is made once. */
const recorded = new WeakMap<UnitPrices, Record<string, string>>();

/** Signs receipts with the key every instance on the database shares. */
export class ReceiptSigner {
  readonly keyId: string;
  readonly publicKeyRaw: Buffer;
  private readonly privateKey: KeyObject;
  private readonly publicKey: KeyObject;

  constructor(material: { privateKey: string; publicKey: string }) {
    this.privateKey = createPrivateKey({ key: Buffer.from(material.privateKey, 'base64'), format: 'der', type: 'pkcs8' });
    this.publicKey = createPublicKey(this.privateKey);
    this.publicKeyRaw = Buffer.from(material.publicKey, 'base64');
    this.keyId = createHash('sha256').update(this.publicKeyRaw).digest('hex').slice(0, 16);
  }

  /** A new key pair as stored: PKCS#8 DER and the raw public key, base64. */
  static generate(): { privateKey: string; publicKey: string } {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url');
    return { privateKey: (privateKey.export({ format: 'der', type: 'pkcs8' })).toString('base64'), publicKey: raw.toString('base64') };
  }

  /** `{receipt, signature}`: the signature covers canonicalJson(receipt) as UTF-8. */
  sign(receipt: { [k: string]: Canon }): { receipt: { [k: string]: Canon }; signature: { alg: 'Ed25519'; key_id: string; value: string } } {
    const value = sign(null, Buffer.from(canonicalJson(receipt)), this.privateKey).toString('base64');
    return { receipt, signature: { alg: 'Ed25519', key_id: this.keyId, value } };
  }

  verify(receipt: { [k: string]: Canon }, signature: string): boolean {
    return verify(null, Buffer.from(canonicalJson(receipt)), this.publicKey, Buffer.from(signature, 'base64'));
  }

  /** What `GET /svc/v1/receipts/key` answers. */
  publicView(): Record<string, string> {
    return {
      alg: 'Ed25519', key_id: this.keyId, public_key: this.publicKeyRaw.toString('base64'),
      public_key_pem: this.publicKey.export({ format: 'pem', type: 'spki' }).toString(),
    };
  }
}
