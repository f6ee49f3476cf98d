// One WebSocket client for the socket tests: opens (or reads the HTTP refusal), keeps every JSON frame, waits for one.
import WebSocket from 'ws';

/**
 * Resolves once open with { ws, frames, closed, until, send }, or with { refused: { status, body } }.
 * `until(pred, from)` resolves with the first frame (from index `from`) that satisfies `pred`; it
 * throws once the socket closed without one, or after `waitMs`. `events` is `frames` by the name the
 * realtime tests use. The second argument is the options, or (as the beta socket tests pass it) the headers alone.
 */
export function connect(url, options = {}) {
  const isOptions = ['headers', 'protocols', 'waitMs'].some((k) => k in options);
  const { headers = {}, protocols, waitMs = 30_000 } = isOptions ? options : { headers: options };
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, protocols, { headers });
    const frames = [];
    const waiters = [];
    let isClosed = false;
    const wake = () => { for (const w of waiters.splice(0)) w(); };
    ws.on('message', (d, binary) => { frames.push(binary ? d : JSON.parse(d.toString())); wake(); });
    const closed = new Promise((r) => ws.on('close', (code, reason) => { isClosed = true; r({ code, reason: reason.toString() }); wake(); }));
    const until = async (pred, from = 0) => {
      const deadline = Date.now() + waitMs;
      for (;;) {
        const hit = frames.slice(from).find(pred);
        if (hit) return hit;
        if (isClosed) throw new Error(`closed before the frame came: ${JSON.stringify(frames.map((f) => f.type ?? f.error ?? Object.keys(f)))}`);
        if (Date.now() > deadline) throw new Error(`the frame did not come: ${JSON.stringify(frames.map((f) => f.type ?? Object.keys(f)))}`);
        await new Promise((r) => { waiters.push(r); setTimeout(r, 500); });
      }
    };
    ws.on('open', () => resolve({ ws, frames, events: frames, closed, until, send: (e) => ws.send(JSON.stringify(e)) }));
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ refused: { status: res.statusCode, body: JSON.parse(body) } }));
    });
    ws.on('error', (e) => { if (!String(e.message).includes('Unexpected server response')) reject(e); });
  });
}

/** Resolves with the close ({code, reason}), or with null when it has not come within `ms`. */
export function closedWithin(s, ms) {
  return Promise.race([s.closed, new Promise((r) => setTimeout(() => r(null), ms))]);
}
