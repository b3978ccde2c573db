// The edge's HTTP API, as the page calls it: same-origin, cookies only
// (the session and the access token are HttpOnly cookies the page never
// sees), JSON bodies, and Google's JSON errors turned into ApiError.

export class ApiError extends Error {
  constructor(status, body, retryAfter) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.status || '';
    const info = (error.details || []).find((d) => d && d.reason) || {};
    this.reason = info.reason || '';
    this.metadata = info.metadata || {};
    this.retryAfter = retryAfter;
  }
}

export async function call(method, path, { body, headers } = {}) {
  const init = {
    method,
    credentials: 'same-origin',
    cache: 'no-store',
    headers: { Accept: 'application/json', ...(headers || {}) },
  };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let reply;
  try {
    reply = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, { error: { message: String(err), status: 'UNAVAILABLE', details: [{ reason: 'NETWORK' }] } });
  }
  let parsed = null;
  const text = await reply.text();
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = null;
    }
  }
  if (!reply.ok) {
    const retry = Number(reply.headers.get('Retry-After') || '0');
    throw new ApiError(reply.status, parsed, Number.isFinite(retry) ? retry : 0);
  }
  return parsed || {};
}

const enc = encodeURIComponent;

export const api = {
  session: () => call('GET', '/v1/session'),
  signIn: (name) => call('POST', '/v1/session', { body: { name } }),
  signOut: () => call('DELETE', '/v1/session'),
  event: (id) => call('GET', `/v1/events/${enc(id)}`),
  seatMap: (id) => call('GET', `/v1/events/${enc(id)}/seatmap`),
  join: (id, proof, door = {}) =>
    call('POST', `/v1/events/${enc(id)}/queue:join`, { body: door, headers: proof ? { 'Boxoffice-Proof': proof } : {} }),
  challenge: (id) => call('GET', `/v1/events/${enc(id)}/queue/challenge`),
  fanDraw: (id) => call('GET', `/v1/events/${enc(id)}/fan-draw`),
  registerForFanDraw: (id) => call('POST', `/v1/events/${enc(id)}/fan-draw:register`, { body: {} }),
  position: (id) => call('GET', `/v1/events/${enc(id)}/queue/position`),
  progress: (id, lane) => call('GET', `/v1/events/${enc(id)}/queue/progress${lane ? `?lane=${enc(lane)}` : ''}`),
  leave: (id) => call('POST', `/v1/events/${enc(id)}/queue:leave`, { body: {} }),
  hold: (id, body) => call('POST', `/v1/events/${enc(id)}/holds`, { body }),
  getHold: (holdId) => call('GET', `/v1/holds/${enc(holdId)}`),
  release: (holdId) => call('DELETE', `/v1/holds/${enc(holdId)}`),
  startPayment: (holdId, method) => call('POST', `/v1/holds/${enc(holdId)}/payment`, { body: { paymentMethod: method } }),
  confirm: (paymentId, key) => call('POST', `/v1/payments/${enc(paymentId)}:confirm`, { body: {}, headers: { 'Idempotency-Key': key } }),
  payment: (paymentId) => call('GET', `/v1/payments/${enc(paymentId)}`),
  cancellation: (bookingId) => call('GET', `/v1/bookings/${enc(bookingId)}/cancellation`),
  cancel: (bookingId, quotedRefund, key) =>
    call('POST', `/v1/bookings/${enc(bookingId)}:cancel`, { body: { quotedRefund }, headers: { 'Idempotency-Key': key } }),
  tickets: (id, holdId) => call('GET', `/v1/events/${enc(id)}/tickets${holdId ? `?holdId=${enc(holdId)}` : ''}`),
  rotation: (ticketId) => call('GET', `/v1/tickets/${enc(ticketId)}/rotation`),
  transfer: (ticketId, email) => call('POST', `/v1/tickets/${enc(ticketId)}:transfer`, { body: { email } }),
  claimTransfer: (transferId, secret) => call('POST', `/v1/transfers/${enc(transferId)}:claim`, { body: { claimSecret: secret } }),
  cancelTransfer: (transferId) => call('POST', `/v1/transfers/${enc(transferId)}:cancel`, { body: {} }),
  joinWaitlist: (id, body) => call('POST', `/v1/events/${enc(id)}/waitlist:join`, { body }),
  waitlistEntry: (id) => call('GET', `/v1/events/${enc(id)}/waitlist`),
  leaveWaitlist: (id) => call('POST', `/v1/events/${enc(id)}/waitlist:leave`, { body: {} }),
  watchUrl: (id) => `/v1/events/${enc(id)}/queue/position:watch`,
};

// Seconds of a proto3 JSON duration ("12.500s").
export function seconds(duration) {
  if (!duration) return null;
  const value = Number(String(duration).replace(/s$/, ''));
  return Number.isFinite(value) ? value : null;
}
