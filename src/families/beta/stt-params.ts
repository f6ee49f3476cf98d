// The speech-to-text parameters of the official clients beyond file, model, language, timestamps and temperature: each sent on to an upstream that lists it (`upstreams.NAME.transcription.stt_params`), or refused by name (422) when it asks for something.
import { GatewayError } from '../../errors.js';
import type { Multipart } from '../../server/multipart.js';
import { STT_PARAMS, type SttParam } from '../../config-transcription.js';

/** The parameter and its values as the form gives them (a list is repeated fields, as the clients send it). */
type Values = readonly string[];

function refusal(field: string, msg: string, code: 'validation_error' | 'unsupported_parameter'): GatewayError {
  return new GatewayError({ status: 422, code, param: field, message: msg, detail: [{ loc: ['body', field], msg, type: code === 'validation_error' ? 'value_error' : code }] });
}

const given = (v: Values): string[] => v.filter((x) => x !== '' && x !== 'null' && x !== 'None' && x !== '[]');

function boolOf(name: string, v: Values): boolean | null {
  const x = given(v).at(-1);
  if (x === undefined) return null;
  if (x === 'true' || x === 'True' || x === '1') return true;
  if (x === 'false' || x === 'False' || x === '0') return false;
  throw refusal(name, `${name} must be true or false; got "${x.slice(0, 32)}".`, 'validation_error');
}

/**
 * Whether a value asks for something: the family's defaults (absent, null, empty, `tag_audio_events`
 * true, the booleans false, `multichannel_output_style` "separate") ask for nothing, so any upstream takes them.
 */
function asks(name: string, v: Values): boolean {
  switch (name) {
    case 'tag_audio_events': return boolOf(name, v) === false;
    case 'no_verbatim': case 'diarize': case 'use_multi_channel': case 'webhook': case 'use_speaker_library': case 'detect_speaker_roles':
      return boolOf(name, v) === true;
    case 'multichannel_output_style': return given(v).some((x) => x !== 'separate');
    default: return given(v).length > 0;
  }
}

/** What Tollgate cannot give back whatever the upstream does: the reply's shape, a delivery, or a fetch it will not make. */
const NEVER: Readonly<Record<string, string>> = {
  diarize: 'the transcript names no speakers here.',
  num_speakers: 'the transcript names no speakers here.',
  diarization_threshold: 'the transcript names no speakers here.',
  detect_speaker_roles: 'the transcript names no speakers here.',
  use_speaker_library: 'the transcript names no speakers here.',
  use_multi_channel: 'the audio is transcribed as one channel.',
  multichannel_output_style: 'the audio is transcribed as one channel.',
  additional_formats: 'the transcript is answered as JSON only.',
  entity_detection: 'the transcript carries no entities.',
  transcript_edit: 'the transcript carries no edited transcript.',
  webhook: 'transcriptions are answered in the response.',
  webhook_id: 'transcriptions are answered in the response.',
  webhook_metadata: 'transcriptions are answered in the response.',
};

/** Every parameter this module rules on, in the client's order. */
export const RULED = [...STT_PARAMS, ...Object.keys(NEVER)] as const;

/**
 * `source_url` / `cloud_storage_url`: this gateway never fetches a URL it is given (it would reach any
 * host from inside the network it runs in); the audio is uploaded as `file`.
 */
function refuseUrls(form: Multipart): void {
  for (const name of ['source_url', 'cloud_storage_url']) {
    if (given(form.fields.get(name) ?? []).length === 0) continue;
    throw refusal(name, `${name} is not supported: this gateway does not fetch audio from a URL. Upload the audio as file.`, 'unsupported_parameter');
  }
}

/**
 * Checks the form's parameters for the upstream that will transcribe: those it lists in `stt_params`
 * are returned to be sent on (as form fields of the same name, each value of a list as its own field);
 * any other that asks for something is refused (422 `unsupported_parameter` naming it).
 */
export function sttParams(form: Multipart, takes: readonly SttParam[], modelId: string): { name: string; value: string }[] {
  refuseUrls(form);
  const out: { name: string; value: string }[] = [];
  for (const name of RULED) {
    const v = form.fields.get(name) ?? [];
    if (!asks(name, v)) continue;
    const never = NEVER[name];
    if (never !== undefined) throw refusal(name, `${name} is not supported: ${never}`, 'unsupported_parameter');
    if (!(takes as readonly string[]).includes(name)) {
      throw refusal(name, `${name} is not supported by model ${modelId}: its upstream does not take it (upstreams.NAME.transcription.stt_params), and dropping it would change the transcript.`,
        'unsupported_parameter');
    }
    if (name === 'seed' && !given(v).every((x) => /^\d{1,10}$/.test(x) && Number(x) <= 2_147_483_647)) {
      throw refusal(name, 'seed must be an integer from 0 to 2147483647.', 'validation_error');
    }
    for (const x of given(v)) out.push({ name, value: x });
  }
  return out;
}
