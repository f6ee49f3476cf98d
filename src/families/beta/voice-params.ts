// The voices group's parameters that Tollgate does not honour: refused by name (422, the family's validation list) when they ask for something.
import { GatewayError } from '../../errors.js';

function refused(where: 'body' | 'query', name: string, why: string): GatewayError {
  const msg = `${name} is not supported here: ${why}`;
  return new GatewayError({ status: 422, code: 'unsupported_parameter', param: name, message: msg, detail: [{ loc: [where, name], msg, type: 'unsupported_parameter' }] });
}

/** `GET /v2/voices` filters with nothing behind them here (no shared library, collections, professional voices or voice metadata). */
const SEARCH_FILTERS = ['fine_tuning_state', 'collection_id', 'gender', 'age', 'language', 'accent', 'use_cases', 'min_notice_period_days',
  'include_custom_rates', 'include_live_moderated', 'high_quality', 'voice_ids'] as const;

/** A search filter given a value that filters (`false` and empty filter nothing) is refused: ignoring it would list voices it excludes. */
export function refuseSearchFilters(q: URLSearchParams): void {
  for (const name of SEARCH_FILTERS) {
    const values = [...q.getAll(name), ...q.getAll(`${name}[]`)].filter((v) => v !== '' && v !== 'false');
    if (values.length > 0) throw refused('query', name, 'voices here are the premade ones and the account\'s cloned voices, with no such attribute to filter on; use `search`, `category` or `voice_type`.');
  }
}

/** `GET /v1/voices/{voice_id}?with_settings=true`: no voice stores settings here (they are sent with each request). */
export function refuseWithSettings(q: URLSearchParams): void {
  if (q.get('with_settings') === 'true') throw refused('query', 'with_settings', 'voices keep no stored settings here; send `voice_settings` with each text-to-speech request.');
}

/** `POST /v1/voices/add` with `remove_background_noise=true`: the samples are cloned as uploaded. */
export function refuseNoiseRemoval(value: string | undefined): void {
  if (value !== undefined && value !== '' && value !== 'false') throw refused('body', 'remove_background_noise', 'the samples are cloned as uploaded; clean them before adding the voice.');
}
