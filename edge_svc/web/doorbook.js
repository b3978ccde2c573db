// What a gate phone holds to judge codes with no network: the event's
// public keys (a JWKS), its check-in list (every ticket, void or checked in,
// and the secret of each rotating code), the event's rules at the door (the
// list's last line: whether a static code admits), and the scans it admitted
// on its own until they are uploaded. Kept in localStorage, so that a reload offline
// still judges; the list is refreshed from its cursor.

import { ApiError, call } from './api.js';
import { CodeVerifier, fromBase64, rotationMac, rotationStep, sameMac, splitRotating } from './codes.js';

const enc = encodeURIComponent;

export class NetworkDown extends Error {}

function stored(name) {
  try {
    return JSON.parse(localStorage.getItem(name) || 'null');
  } catch {
    return null;
  }
}

function keep(name, value) {
  try {
    localStorage.setItem(name, JSON.stringify(value));
  } catch {
    // Full or private mode: held in memory while the page is open.
  }
}

export class DoorBook {
  constructor({ eventId, key }) {
    this.eventId = String(eventId);
    this.key = key;
    this.name = `bo.gate.${this.eventId}`;
    const saved = stored(`${this.name}.list`) || {};
    this.jwks = saved.jwks || null;
    this.cursor = saved.cursor || '';
    // {staticCodes, reentry}; until the list says, a static code is refused.
    this.rules = saved.rules || null;
    // Ticket id -> {void, at, gate, secret, section, seat}.
    this.tickets = saved.tickets || {};
    this.queue = stored(`${this.name}.queue`) || [];
    this.verifier = this.jwks ? new CodeVerifier(this.jwks) : null;
  }

  get size() {
    return Object.keys(this.tickets).length;
  }

  save() {
    keep(`${this.name}.list`, { jwks: this.jwks, cursor: this.cursor, rules: this.rules, tickets: this.tickets });
    keep(`${this.name}.queue`, this.queue);
  }

  headers() {
    return { Authorization: `Device ${this.key}` };
  }

  async fetchOr(method, path, body) {
    try {
      return await call(method, path, { body, headers: this.headers() });
    } catch (err) {
      // No network, or the door behind the edge unreachable: the phone
      // decides by itself until it can ask again.
      if (err.status === 0 || err.status === 502 || err.status === 503 || err.status === 504) throw new NetworkDown(err.message);
      throw err;
    }
  }

  // The keys, then the list (whole, or the changes since the cursor).
  async refresh() {
    const jwks = await this.fetchOr('GET', `/v1/events/${enc(this.eventId)}/checkin-keys`);
    this.jwks = jwks;
    this.verifier = new CodeVerifier(jwks);
    const since = this.cursor ? `?since=${enc(this.cursor)}` : '';
    let reply;
    try {
      reply = await fetch(`/v1/events/${enc(this.eventId)}/checkin-list${since}`, {
        headers: { ...this.headers(), Accept: 'application/x-ndjson' },
        cache: 'no-store',
      });
    } catch (err) {
      throw new NetworkDown(String(err));
    }
    if (!reply.ok) {
      if (reply.status >= 502 && reply.status <= 504) throw new NetworkDown(`HTTP ${reply.status}`);
      // Answered as the API's other errors.
      let body = null;
      try {
        body = await reply.json();
      } catch {
        body = null;
      }
      throw new ApiError(reply.status, body, 0);
    }
    // Read whole, then line by line (one message of the list's stream a line).
    let text;
    try {
      text = await reply.text();
    } catch (err) {
      throw new NetworkDown(String(err));
    }
    let cursor = '';
    let rules = null;
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      const part = JSON.parse(line);
      if (part.error) throw new Error(part.error.message);
      for (const entry of part.entries || []) this.learn(entry);
      if (part.cursor) cursor = part.cursor;
      if (part.rules) rules = { staticCodes: part.rules.staticCodes === true, reentry: part.rules.reentry === true };
    }
    if (cursor) this.cursor = cursor;
    if (rules) this.rules = rules;
    this.save();
  }

  learn(entry) {
    const ticket = entry.ticket || {};
    const first = entry.firstCheckin || null;
    const known = this.tickets[ticket.ticketId] || {};
    this.tickets[ticket.ticketId] = {
      void: Boolean(entry.void),
      at: first ? first.checkedInAt : known.at || null,
      gate: first ? first.gateId : known.gate || null,
      secret: entry.rotationSecret || known.secret || '',
      section: ticket.sectionId || '',
      seat: ticket.seatLabel || '',
    };
  }

  // The verdict the door gives online: {result, ticket, firstCheckin}.
  async scanOnline(code, gateId) {
    const reply = await this.fetchOr('POST', `/v1/events/${enc(this.eventId)}/checkins`, { code, gateId });
    const result = String(reply.result || '').replace(/^SCAN_RESULT_/, '');
    const ticket = reply.ticket;
    if (ticket && ticket.ticketId && result === 'ADMITTED') {
      const first = reply.firstCheckin || {};
      const known = this.tickets[ticket.ticketId] || { void: false, secret: '', section: ticket.sectionId, seat: ticket.seatLabel };
      this.tickets[ticket.ticketId] = { ...known, at: first.checkedInAt || new Date().toISOString(), gate: first.gateId || gateId };
      this.save();
    }
    return {
      result,
      ticket: ticket ? { section: ticket.sectionId, seat: ticket.seatLabel } : null,
      first: reply.firstCheckin ? { at: reply.firstCheckin.checkedInAt, gate: reply.firstCheckin.gateId } : null,
    };
  }

  // The verdict from what the phone holds; an admission is queued for upload.
  async scanOffline(code, gateId) {
    if (!this.verifier) return { result: 'INVALID', ticket: null, first: null };
    const text = code.trim();
    const rotating = splitRotating(text);
    const claims = await this.verifier.verify(rotating ? rotating.code : text);
    if (!claims) return { result: 'INVALID', ticket: null, first: null };
    if (String(claims.eventId) !== this.eventId) return { result: 'WRONG_EVENT', ticket: null, first: null };
    // A static code (printed, e-mailed, a screenshot's) where the event takes
    // rotating codes only: the door's answer, EXPIRED_CODE.
    if (!rotating && !(this.rules && this.rules.staticCodes)) return { result: 'EXPIRED_CODE', ticket: null, first: null };
    const entry = this.tickets[claims.ticketId];
    const ticket = { section: claims.sectionId, seat: claims.seatLabel };
    if (rotating) {
      const now = rotationStep(Date.now());
      if (rotating.step > now + 1) return { result: 'INVALID', ticket: null, first: null };
      if (rotating.step < now - 1) return { result: 'EXPIRED_CODE', ticket, first: null };
      const secret = entry && entry.secret ? fromBase64(entry.secret) : null;
      if (!secret || !sameMac(await rotationMac(secret, claims.ticketId, rotating.step), rotating.mac)) {
        return { result: 'INVALID', ticket: null, first: null };
      }
    }
    if (!entry) return { result: 'UNKNOWN', ticket: null, first: null };
    if (entry.void) return { result: 'VOID', ticket, first: null };
    if (entry.at) return { result: 'ALREADY_CHECKED_IN', ticket, first: { at: entry.at, gate: entry.gate } };
    const at = new Date().toISOString();
    entry.at = at;
    entry.gate = gateId;
    this.queue.push({ code: text, gateId, scannedAt: at });
    this.save();
    return { result: 'ADMITTED', ticket, first: { at, gate: gateId } };
  }

  // Uploads the queued scans: {uploaded, conflicts}; the queue is emptied
  // only once the door has them.
  async upload() {
    if (!this.queue.length) return { uploaded: 0, conflicts: 0 };
    const scans = this.queue.slice();
    const reply = await this.fetchOr('POST', `/v1/events/${enc(this.eventId)}/checkins:upload`, { scans });
    this.queue = this.queue.slice(scans.length);
    this.save();
    return { uploaded: scans.length, conflicts: Number(reply.conflicts || 0) };
  }
}
