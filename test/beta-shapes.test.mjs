// The beta family's shapes made by Tollgate: transcription words and spacing, alignment, output formats, the synthesis meter's billing rule.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chunkResponse } from '../dist/families/beta/transcript.js';
import { alignment, SpeechMeter, IDENTITY } from '../dist/meter/synthesis.js';
import { OUTPUT_FORMATS, formatSpec, outputFormatOf } from '../dist/families/beta/schemas.js';

test('a verbose_json transcription becomes words with spacing between them, times in seconds', () => {
  const out = chunkResponse({ text: ' Hello big world', language: 'english', words: [
    { word: 'Hello', start: 0, end: 0.5 }, { word: 'big', start: 0.6, end: 0.9 }, { word: 'world', start: 1.0, end: 1.4 }] },
  { durationSecs: 1.5, granularity: 'word', languageCode: null });
  assert.equal(out.text, 'Hello big world');
  assert.equal(out.language_code, 'eng');
  assert.deepEqual(out.words.map((w) => [w.text, w.type, w.start, w.end]), [
    ['Hello', 'word', 0, 0.5], [' ', 'spacing', 0.5, 0.6], ['big', 'word', 0.6, 0.9], [' ', 'spacing', 0.9, 1], ['world', 'word', 1, 1.4]]);
});

test('without word times the words spread over the measured duration; character granularity times each character', () => {
  const out = chunkResponse({ text: 'ab cd' }, { durationSecs: 2, granularity: 'character', languageCode: 'de' });
  assert.equal(out.language_code, 'deu');
  const words = out.words.filter((w) => w.type === 'word');
  assert.deepEqual(words.map((w) => [w.start, w.end]), [[0, 1], [1, 2]]);
  assert.deepEqual(words[1].characters, [{ text: 'c', start: 1, end: 1.5 }, { text: 'd', start: 1.5, end: 2 }]);
  const none = chunkResponse({ text: 'ab cd' }, { durationSecs: 2, granularity: 'none', languageCode: null });
  assert.ok(none.words.every((w) => w.start === null && w.end === null));
});

test('alignment gives every character an equal share of the audio, ending with it', () => {
  const a = alignment('Hi!', 0.9);
  assert.deepEqual(a.characters, ['H', 'i', '!']);
  assert.deepEqual(a.character_start_times_seconds, [0, 0.3, 0.6]);
  assert.deepEqual(a.character_end_times_seconds, [0.3, 0.6, 0.9]);
});

test('output_format takes the whole enumeration and nothing else', () => {
  assert.equal(OUTPUT_FORMATS.length, 28, 'the official clients\' literal (elevenlabs 2.78): 28 formats');
  assert.equal(outputFormatOf(''), 'mp3_44100_128');
  for (const f of OUTPUT_FORMATS) assert.equal(outputFormatOf(`output_format=${f}`), f);
  assert.deepEqual(formatSpec('opus_48000_64'), { codec: 'opus', sampleRate: 48000, kbps: 64, contentType: 'audio/ogg' });
  for (const bad of ['mp3_44100', 'pcm_96000', 'wav', 'MP3_44100_128']) {
    assert.throws(() => outputFormatOf(`output_format=${bad}`), (e) => e.status === 422 && e.detail[0].loc.join('.') === 'query.output_format');
  }
});

test('a synthesis stream bills its whole input once audio reached the client, and nothing before', () => {
  const whole = new SpeechMeter({ characters: 12 }, IDENTITY, 'audio/pcm', {});
  whole.onData(Buffer.alloc(10));
  whole.onEnd(true);
  assert.deepEqual([whole.usage().characters, whole.usage().basis], [12, 'exact']);
  const dropped = new SpeechMeter({ audioInMs: 3000 }, IDENTITY, 'audio/pcm', {});
  dropped.onData(Buffer.alloc(10));
  dropped.onEnd(false);
  assert.deepEqual([dropped.usage().audioInMs, dropped.usage().basis], [3000, 'partial']);
  const early = new SpeechMeter({ characters: 12 }, IDENTITY, 'audio/pcm', {});
  early.onEnd(false);
  assert.equal(early.usage().characters, 0);
});
