// TypeBox schemas for the OpenAI-shaped bodies: the fields the gateway reads are typed, all others pass through.
import { Type } from '@sinclair/typebox';
import { compile } from '../validate.js';

/** The roles OpenAI's chat schema takes (`function` is its deprecated one). */
export const ROLES = ['system', 'developer', 'user', 'assistant', 'tool', 'function'] as const;

// Content is text or a list of typed parts (text, image_url, input_audio, file…); null only beside tool calls.
const Content = Type.Union([
  Type.String(), Type.Array(Type.Object({ type: Type.String({ minLength: 1 }) }, { additionalProperties: true })), Type.Null(),
], { expected: 'a string or an array of content parts (objects with a `type`, like {"type": "text", "text": "…"})' });

const Message = Type.Object({
  role: Type.Union(ROLES.map((r) => Type.Literal(r))),
  content: Type.Optional(Content),
}, { additionalProperties: true, expected: 'a message object with a `role` and `content`' });

export const ChatRequest = Type.Object({
  model: Type.String({ minLength: 1 }),
  messages: Type.Array(Message, { minItems: 1, expected: 'a non-empty array of messages' }),
  stream: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  stream_options: Type.Optional(Type.Union([Type.Null(), Type.Object({
    include_usage: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  }, { additionalProperties: true })])),
  max_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
  max_completion_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 1 }), Type.Null()])),
  n: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 128 }), Type.Null()])),
  temperature: Type.Optional(Type.Union([Type.Number({ minimum: 0, maximum: 2 }), Type.Null()])),
  top_p: Type.Optional(Type.Union([Type.Number({ minimum: 0, maximum: 1 }), Type.Null()])),
  presence_penalty: Type.Optional(Type.Union([Type.Number({ minimum: -2, maximum: 2 }), Type.Null()])),
  frequency_penalty: Type.Optional(Type.Union([Type.Number({ minimum: -2, maximum: 2 }), Type.Null()])),
  top_logprobs: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 20 }), Type.Null()])),
}, { additionalProperties: true });

export const checkChat = compile(ChatRequest);

/** Parameters whose silent loss would change the output, and that no configured upstream honours. */
export const CHAT_REJECTED = ['audio', 'prediction', 'web_search_options', 'functions', 'function_call', 'moderation'] as const;

const PromptText = Type.Union([
  Type.String(), Type.Array(Type.String(), { minItems: 1 }),
  Type.Array(Type.Integer(), { minItems: 1 }), Type.Array(Type.Array(Type.Integer(), { minItems: 1 }), { minItems: 1 }),
]);

export const CompletionRequest = Type.Object({
  model: Type.String({ minLength: 1 }),
  prompt: PromptText,
  stream: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  stream_options: Type.Optional(Type.Union([Type.Null(), Type.Object({ include_usage: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])) }, { additionalProperties: true })])),
  max_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.Null()])),
  n: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 128 }), Type.Null()])),
  best_of: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 20 }), Type.Null()])),
}, { additionalProperties: true });

export const checkCompletion = compile(CompletionRequest);

export const EmbeddingRequest = Type.Object({
  model: Type.String({ minLength: 1 }),
  input: PromptText,
  encoding_format: Type.Optional(Type.Union([Type.Literal('float'), Type.Literal('base64')])),
  dimensions: Type.Optional(Type.Integer({ minimum: 1 })),
  user: Type.Optional(Type.String()),
}, { additionalProperties: true });

export const checkEmbedding = compile(EmbeddingRequest);
