// The waiting room, live: Server-Sent Events from the edge while they
// work; when they fail, the public progress document at the pollAfter pace
// and the fan's own place from their position. A dropped connection, a
// drained or restarted edge, a reload or a second tab: the fan keeps the
// one place (joining is idempotent and the server remembers it), and this
// reconnects by itself.

import { api, seconds } from './api.js';

const WAITING = 'QUEUE_STATE_WAITING';
const ADMITTED = 'QUEUE_STATE_ADMITTED';
const SOLD_OUT = 'ADMISSION_STATE_SOLD_OUT';
const PRE_QUEUE_BAND = 2 ** 50;
// How often a sold-out room's public (CDN-cached) progress is read again,
// to learn that seats came back and the sale opened again.
const SOLD_OUT_RECHECK_MS = 30000;

export class Waiting {
  constructor(eventId, { onPosition, onAdmitted, onEnded, onLink }) {
    this.eventId = eventId;
    this.onPosition = onPosition;
    this.onAdmitted = onAdmitted;
    this.onEnded = onEnded;
    this.onLink = onLink;
    this.source = null;
    this.timers = new Set();
    this.backoff = 1000;
    this.polling = false;
    this.base = null;
    this.stopped = true;
    this.settling = false;
  }

  start() {
    this.stopped = false;
    this.subscribe();
  }

  stop() {
    this.stopped = true;
    this.closeSource();
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.polling = false;
  }

  later(ms, fn) {
    const t = setTimeout(() => {
      this.timers.delete(t);
      if (!this.stopped) fn();
    }, ms);
    this.timers.add(t);
  }

  closeSource() {
    if (this.source) {
      this.source.close();
      this.source = null;
    }
  }

  subscribe() {
    if (this.stopped) return;
    this.closeSource();
    const source = new EventSource(api.watchUrl(this.eventId));
    this.source = source;
    source.addEventListener('open', () => {
      this.backoff = 1000;
      this.polling = false;
      this.onLink('live');
    });
    source.addEventListener('position', (e) => this.position(JSON.parse(e.data).position));
    source.addEventListener('final', (e) => {
      this.closeSource();
      const position = JSON.parse(e.data).position;
      this.settle(position);
    });
    source.addEventListener('reconnect', () => {
      // The edge is draining: another replica (or this one, restarted) answers.
      this.closeSource();
      this.onLink('reconnecting');
      this.later(300, () => this.subscribe());
    });
    source.addEventListener('error', (e) => {
      if (source !== this.source) return;
      if (e.data) {
        let reason = '';
        try {
          reason = JSON.parse(e.data).error.details[0].reason;
        } catch {
          reason = '';
        }
        if (reason === 'NOT_SIGNED_IN' || reason === 'SESSION_INVALID') {
          this.stop();
          this.onEnded(reason);
          return;
        }
      }
      this.onLink('reconnecting');
      this.fallback();
      if (source.readyState === EventSource.CLOSED) {
        // Refused (a 503 while an edge starts or drains): try again later.
        this.closeSource();
        const wait = this.backoff;
        this.backoff = Math.min(15000, this.backoff * 2);
        this.later(wait, () => this.subscribe());
      }
    });
  }

  position(position) {
    if (!position) return;
    if (position.state === WAITING && position.admissionState !== SOLD_OUT) {
      this.onPosition(position);
    } else {
      this.settle(position);
    }
  }

  // A final state: read the position (which, once admitted, sets the
  // HttpOnly token cookie) and hand over.
  async settle(hint) {
    if (this.settling || this.stopped) return;
    this.settling = true;
    try {
      const { position } = await api.position(this.eventId);
      if (position.state === ADMITTED) {
        this.stop();
        this.onAdmitted(position);
      } else if (position.state === WAITING && position.admissionState === SOLD_OUT) {
        this.soldOut(position);
      } else if (position.state === WAITING) {
        this.onPosition(position);
        if (!this.source) this.subscribe();
      } else {
        this.stop();
        this.onEnded(position.state || (hint && hint.state));
      }
    } catch (err) {
      this.onLink('reconnecting');
      this.later(this.backoff, () => this.settle(hint));
    } finally {
      this.settling = false;
    }
  }

  // Sold out: nobody is admitted, the stream has ended. The fan keeps their
  // place; the public progress says when the sale opens again (seats came
  // back and nobody waits for them on the waiting list).
  soldOut(position) {
    this.closeSource();
    this.polling = false;
    this.onPosition(position);
    this.later(SOLD_OUT_RECHECK_MS, () => this.recheck());
  }

  async recheck() {
    try {
      const { progress } = await api.progress(this.eventId, this.lane);
      if (progress && progress.admissionState !== SOLD_OUT) {
        this.subscribe();
        return;
      }
    } catch {
      // Try again at the same pace.
    }
    this.later(SOLD_OUT_RECHECK_MS, () => this.recheck());
  }

  // Polling while the stream is down: the fan's place once from their
  // position, then moved by the public (CDN-cached) progress document.
  async fallback() {
    if (this.polling || this.stopped) return;
    this.polling = true;
    let pace = 5;
    try {
      const { position } = await api.position(this.eventId);
      if (position.state !== WAITING) {
        this.polling = false;
        this.position(position);
        return;
      }
      this.base = { score: Number(position.score), ahead: Number(position.ahead), admittedTotal: null, preQueue: null };
      // A lane's scores are its own: its progress is the lane's.
      this.lane = position.lane || this.lane || '';
      pace = seconds(position.pollAfter) || pace;
      this.onPosition(position);
    } catch {
      // The edge is away; the progress below (or the next try) tells.
    }
    const tick = async () => {
      if (!this.polling || this.stopped) return;
      try {
        const { progress } = await api.progress(this.eventId, this.lane);
        this.progress(progress);
      } catch {
        // Keep trying at the same pace.
      }
      if (this.source && this.source.readyState === EventSource.OPEN) {
        this.polling = false;
        return;
      }
      this.later(pace * 1000, tick);
    };
    this.later(0, tick);
  }

  progress(progress) {
    const base = this.base;
    if (!base || !progress) return;
    const admittedTotal = Number(progress.admittedTotal || 0);
    const preQueue = Number(progress.preQueueJoined || 0);
    if (base.admittedTotal === null) {
      base.admittedTotal = admittedTotal;
      base.preQueue = preQueue;
    }
    if (progress.admissionState === SOLD_OUT || (admittedTotal > 0 && Number(progress.admittedThroughScore || 0) >= base.score)) {
      this.settle();
      return;
    }
    let ahead = base.ahead - Math.max(0, admittedTotal - base.admittedTotal);
    if (base.score < PRE_QUEUE_BAND) ahead += Math.round(Math.max(0, preQueue - base.preQueue) * (base.score / PRE_QUEUE_BAND));
    // Not capped by the queue's length: a cached progress document may be
    // older than the fan's own reading, and the estimate errs on the long side.
    ahead = Math.max(0, ahead);
    const rate = Number(progress.admissionRatePerSecond || 0);
    this.onPosition({
      state: WAITING,
      ahead: String(ahead),
      admissionState: progress.admissionState,
      eta: rate >= 0.01 ? `${(ahead + 1) / rate}s` : '',
    });
  }
}
