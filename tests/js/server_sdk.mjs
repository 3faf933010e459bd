// server_sdk.mjs — drives a real ds4-server with the official `openai` and `@anthropic-ai/sdk`
// clients: chat (plain, streaming, reasoning), completions, responses (plain and streaming),
// messages (plain, streaming, count_tokens), tool-call round trips in each API's own history
// format, model listing, errors as SDK exceptions, auth, and cancellation by aborting a stream.
//
// Usage: node server_sdk.mjs --server PATH/ds4-server --model PATH/tiny-chat.gguf
// Starts the server on a free port (its own DS4_LOCK_FILE), runs every case, stops it.
// Exit 0: all passed; 1: a failure; 77: skipped (SDK packages missing).
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
if (!args.server || !args.model) {
  console.error('usage: node server_sdk.mjs --server PATH --model PATH');
  process.exit(2);
}

let OpenAI, Anthropic;
try {
  OpenAI = (await import('openai')).default;
  Anthropic = (await import('@anthropic-ai/sdk')).default;
} catch (e) {
  console.log(`SKIP: SDK packages not installed (run scripts/setup.sh): ${e.message}`);
  process.exit(77);
}

const KEY = 'sk-ds4-js-test';
const MODEL = 'deepseek-v4-flash';

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

const dir = mkdtempSync(join(tmpdir(), 'ds4-js-'));
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const server = spawn(args.server, ['-m', args.model, '--port', String(port), '--ctx', '2048', '-n', '64',
  '--api-key', KEY, '--queue-size', '4', '--drain-timeout', '2'], {
  env: { ...process.env, DS4_LOCK_FILE: join(dir, 'ds4.lock') },
  stdio: ['ignore', 'inherit', 'inherit'],
});
let serverExited = false;
server.on('exit', () => { serverExited = true; });

async function waitHealthy() {
  for (let i = 0; i < 300; i++) {
    if (serverExited) throw new Error('ds4-server exited during startup');
    try {
      const r = await fetch(`${base}/health`);
      if (r.ok) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('ds4-server did not become healthy');
}

const openai = new OpenAI({ apiKey: KEY, baseURL: `${base}/v1`, maxRetries: 0, timeout: 60000 });
const anthropic = new Anthropic({ apiKey: KEY, baseURL: base, maxRetries: 0, timeout: 60000 });
const noThink = { thinking: { type: 'disabled' } };

const cases = [];
const test = (name, fn) => cases.push({ name, fn });

test('openai models.list and retrieve', async () => {
  const list = await openai.models.list();
  assert.equal(list.data[0].id, MODEL);
  const m = await openai.models.retrieve('deepseek-chat');
  assert.equal(m.id, 'deepseek-chat');
  await assert.rejects(openai.models.retrieve('no-such-model'), (e) => e.status === 404);
});

test('chat completion, greedy, deterministic, cached prefix in usage', async () => {
  const req = { model: MODEL, messages: [{ role: 'user', content: 'Quel ramo del lago di Como' }],
    max_tokens: 8, temperature: 0, ...noThink };
  const a = await openai.chat.completions.create(req);
  assert.equal(a.object, 'chat.completion');
  assert.equal(typeof a.choices[0].message.content, 'string');
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 8);
  const b = await openai.chat.completions.create(req);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, b.usage.prompt_tokens);
});

test('chat streaming equals non-streaming; usage chunk', async () => {
  const req = { model: MODEL, messages: [{ role: 'user', content: 'Tell me about the sea' }],
    max_tokens: 10, temperature: 0, ...noThink };
  const full = await openai.chat.completions.create(req);
  const stream = await openai.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.role) role = c.delta.role;
    if (c.delta.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 10);
});

test('chat streaming with thinking: reasoning_content separate from content', async () => {
  const stream = await openai.chat.completions.create({ model: MODEL, stream: true, max_tokens: 6, temperature: 0,
    messages: [{ role: 'user', content: 'Think first' }] });
  let reasoning = '', content = '';
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? '';
    content += d.content ?? '';
  }
  assert.ok(reasoning.length > 0, 'reasoning streamed');
  assert.equal(content, '');
});

test('chat tool-call round trip (assistant tool_calls + tool result in history)', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Get the weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const r = await openai.chat.completions.create({ model: MODEL, max_tokens: 4, temperature: 0, tools,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_0123456789abcdef0123456789abcdef', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_0123456789abcdef0123456789abcdef', content: '{"temp":18}' },
    ] });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 100, 'tools block rendered into the prompt');
  await assert.rejects(openai.chat.completions.create({ model: MODEL, max_tokens: 2, tools,
    tool_choice: { type: 'function', function: { name: 'missing' } }, messages: [{ role: 'user', content: 'x' }] }),
  (e) => e.status === 400 && /missing/.test(e.message));
});

test('legacy completions (raw prompt) plain and streaming', async () => {
  const c = await openai.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
  assert.equal(c.object, 'text_completion');
  assert.equal(c.usage.completion_tokens, 5);
  const s = await openai.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, c.choices[0].text);
});

test('responses: plain, streaming events, function_call round trip', async () => {
  const r = await openai.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 4, temperature: 0,
    reasoning: { effort: 'none' } });
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'incomplete');
  assert.equal(r.output[0].type, 'message');
  assert.equal(typeof r.output_text, 'string');
  const stream = await openai.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 4, temperature: 0,
    reasoning: { effort: 'none' }, stream: true });
  const types = [];
  let seq = -1, text = '';
  for await (const ev of stream) {
    types.push(ev.type);
    assert.equal(ev.sequence_number, seq + 1);
    seq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') text += ev.delta;
  }
  assert.equal(types[0], 'response.created');
  assert.ok(types.includes('response.output_item.added'));
  assert.ok(types.includes('response.output_text.done'));
  assert.equal(types.at(-1), 'response.incomplete');
  assert.equal(text, r.output_text);
  const tools = [{ type: 'function', name: 'shell', description: 'Run a command',
    parameters: { type: 'object', properties: { cmd: { type: 'string' } } } }];
  const t = await openai.responses.create({ model: MODEL, max_output_tokens: 3, tools, input: [
    { role: 'user', content: 'List files' },
    { type: 'function_call', call_id: 'call_abc', name: 'shell', arguments: '{"cmd":"ls"}' },
    { type: 'function_call_output', call_id: 'call_abc', output: 'a.c\nb.c' },
  ] });
  assert.ok(t.usage.input_tokens > 50);
  await assert.rejects(openai.responses.create({ model: MODEL, input: [
    { type: 'function_call_output', call_id: 'call_unknown', output: 'x' }] }), (e) => e.status === 400);
  await assert.rejects(openai.responses.create({ model: MODEL, input: 'x', previous_response_id: 'resp_1' }),
    (e) => e.status === 400 && /previous_response_id/.test(e.message));
});

test('anthropic messages: plain, stream helper, count_tokens', async () => {
  const req = { model: MODEL, max_tokens: 6, temperature: 0, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Hello there' }] };
  const m = await anthropic.messages.create(req);
  assert.equal(m.type, 'message');
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.content[0].type, 'text');
  const final = await anthropic.messages.stream(req).finalMessage();
  assert.equal(final.content[0].text, m.content[0].text);
  assert.equal(final.usage.output_tokens, 6);
  const n = await anthropic.messages.countTokens({ model: MODEL, messages: req.messages, thinking: { type: 'disabled' } });
  assert.equal(n.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('anthropic thinking stream and tool_use/tool_result round trip', async () => {
  const events = [];
  const s = anthropic.messages.stream({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'Think' }] });
  s.on('streamEvent', (e) => events.push(e.type));
  const msg = await s.finalMessage();
  assert.equal(msg.content[0].type, 'thinking');
  assert.ok(msg.content[0].thinking.length > 0);
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
  const tools = [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
  const r = await anthropic.messages.create({ model: MODEL, max_tokens: 3, tools, messages: [
    { role: 'user', content: 'Weather in Rome?' },
    { role: 'assistant', content: [{ type: 'text', text: 'Checking.' },
      { type: 'tool_use', id: 'toolu_0123456789abcdef0123456789abcdef', name: 'get_weather', input: { city: 'Rome' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_0123456789abcdef0123456789abcdef', content: '22C sunny' },
      { type: 'text', text: 'And tomorrow?' }] },
  ] });
  assert.equal(r.type, 'message');
  assert.ok(r.usage.input_tokens + r.usage.cache_read_input_tokens > 50);
});

test('errors arrive as SDK exceptions in each API shape', async () => {
  await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: [] }),
    (e) => e.status === 400 && e.error?.type === 'invalid_request_error');
  await assert.rejects(openai.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404);
  await assert.rejects(openai.chat.completions.create({ model: MODEL, n: 3, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 400 && /'n'/.test(e.message));
  await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'system', content: 'x' }] }),
    (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error');
  const long = 'word '.repeat(3000);
  await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: long }] }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded');
  const bad = new OpenAI({ apiKey: 'wrong', baseURL: `${base}/v1`, maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  const badA = new Anthropic({ apiKey: 'wrong', baseURL: base, maxRetries: 0 });
  await assert.rejects(badA.messages.create({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 401 && e.error?.error?.type === 'authentication_error');
});

test('aborting a stream cancels the generation on the server', async () => {
  const ac = new AbortController();
  const stream = await openai.chat.completions.create({ model: MODEL, stream: true, max_tokens: 1500, ...noThink,
    messages: [{ role: 'user', content: 'A very long story' }] }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const chunk of stream) {
      if (++n === 3) ac.abort();
    }
  } catch { /* the SDK reports the abort as an error or just ends the iteration */ }
  assert.ok(n >= 3 && n < 1500, `stream stopped early (${n} chunks)`);
  const t0 = Date.now();
  const after = await openai.chat.completions.create({ model: MODEL, max_tokens: 2, ...noThink,
    messages: [{ role: 'user', content: 'next' }] });
  assert.equal(after.usage.completion_tokens, 2);
  assert.ok(Date.now() - t0 < 15000, 'worker was freed');
  const metrics = await (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${KEY}` } })).text();
  assert.match(metrics, /ds4_cancelled_total [1-9]/);
});

test('DS4_LOCK_FILE: a second instance refuses to start (exit 2)', async () => {
  const second = spawn(args.server, ['-m', args.model, '--port', String(await freePort())], {
    env: { ...process.env, DS4_LOCK_FILE: join(dir, 'ds4.lock') }, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  second.stderr.on('data', (d) => { err += d; });
  const code = await new Promise((r) => second.on('exit', r));
  assert.equal(code, 2);
  assert.match(err, /another ds4 process is already running \(pid \d+\)/);
});

let failed = 0;
try {
  await waitHealthy();
  for (const c of cases) {
    const t0 = Date.now();
    try {
      await c.fn();
      console.log(`ok   ${c.name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${c.name}: ${e.stack ?? e}`);
    }
  }
} catch (e) {
  failed++;
  console.log(`FAIL setup: ${e.stack ?? e}`);
} finally {
  server.kill('SIGTERM');
  await new Promise((r) => (serverExited ? r() : server.on('exit', r)));
  rmSync(dir, { recursive: true, force: true });
}
console.log(failed ? `${failed} of ${cases.length} cases failed` : `all ${cases.length} cases passed`);
process.exit(failed ? 1 : 0);
