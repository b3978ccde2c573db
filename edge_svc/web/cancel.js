// Cancelling a booking from the tickets page: the quote under the event's
// refund policy first (what comes back, and until when), then the cancel,
// which echoes the quote so that it never refunds more than the fan saw; a
// refund window that closes in between refuses the cancel and a new quote
// is shown. The key of a cancel is kept while its quote is open, so that
// pressing again after a lost answer asks for the same cancellation.

import { api, ApiError } from './api.js';

export class Cancellations {
  // i18n(): the current I18n; $: the page's getElementById; errorText(err):
  // the page's words for an error; cancelled(bookingId, answer): called once
  // a booking is cancelled.
  constructor({ i18n, $, errorText, cancelled }) {
    this.i18n = i18n;
    this.$ = $;
    this.errorText = errorText;
    this.cancelled = cancelled;
    this.open = null; // { bookingId, quote, key, busy }
    this.done = null; // the last cancellation's answer, shown until another quote opens
    $('cancel-confirm').addEventListener('click', () => this.confirm());
    $('cancel-keep').addEventListener('click', () => this.close());
  }

  t(key, params) {
    return this.i18n().t(key, params);
  }

  // One row per booking among the (valid) tickets shown, each with its
  // cancel button, and the open quote, if any.
  render(tickets, event) {
    const bookings = new Map();
    for (const tk of tickets) {
      const found = bookings.get(tk.holdId) || { id: tk.holdId, count: 0, sectionId: tk.sectionId };
      found.count += 1;
      bookings.set(tk.holdId, found);
    }
    this.$('bookings').hidden = bookings.size === 0 && !this.done;
    this.$('booking-list').replaceChildren(
      ...[...bookings.values()].map((booking) => {
        const li = document.createElement('li');
        li.className = 'booking';
        const section = event?.sections.find((s) => s.sectionId === booking.sectionId);
        const words = this.t('cancel.booking', {
          count: booking.count,
          section: section ? section.displayName : booking.sectionId,
        });
        const text = document.createElement('span');
        text.textContent = words;
        const button = document.createElement('button');
        button.type = 'button';
        button.className = 'cancel-booking';
        button.dataset.booking = booking.id;
        button.textContent = this.t('cancel.ask');
        button.setAttribute('aria-label', this.t('cancel.askFor', { booking: words }));
        button.addEventListener('click', () => this.quote(booking.id));
        li.append(text, button);
        return li;
      }),
    );
    this.renderQuote();
  }

  renderQuote() {
    const panel = this.$('cancel-panel');
    const open = this.open;
    panel.hidden = !open && !this.done;
    const confirm = this.$('cancel-confirm');
    const keep = this.$('cancel-keep');
    this.$('cancel-title').textContent = this.t(open || !this.done ? 'cancel.title' : 'cancel.doneTitle');
    if (!open) {
      this.$('cancel-quote').textContent = this.done
        ? this.t('cancel.done', { refund: this.i18n().money(this.done.refund) })
        : '';
      confirm.hidden = true;
      keep.hidden = true;
      return;
    }
    const i18n = this.i18n();
    const quote = open.quote;
    confirm.hidden = !quote || !quote.allowed;
    keep.hidden = false;
    keep.textContent = quote && quote.allowed ? this.t('cancel.keep') : this.t('cancel.close');
    confirm.disabled = open.busy;
    if (!quote) {
      this.$('cancel-quote').textContent = this.t('cancel.checking');
    } else if (quote.allowed) {
      const terms = {
        refund: i18n.money(quote.refund),
        price: i18n.money(quote.price),
        percent: quote.refundPercent,
        until: quote.until ? i18n.dateTime(quote.until) : '',
      };
      this.$('cancel-quote').textContent = this.t('cancel.quote', terms);
      confirm.textContent = this.t('cancel.confirm', terms);
    } else {
      const until = quote.until ? i18n.dateTime(quote.until) : '';
      this.$('cancel-quote').textContent = this.t(`cancel.not.${quote.reason}`, { until });
    }
  }

  async quote(bookingId, note = '') {
    this.done = null;
    this.open = { bookingId, quote: null, key: null, busy: false };
    this.say(note, 'info');
    this.renderQuote();
    this.$('cancel-title').focus();
    try {
      const quote = await api.cancellation(bookingId);
      if (this.open?.bookingId !== bookingId) return;
      this.open.quote = quote;
    } catch (err) {
      if (this.open?.bookingId !== bookingId) return;
      this.open.quote = { allowed: false, reason: 'unknown' };
      this.say(this.errorText(err));
    }
    this.renderQuote();
  }

  async confirm() {
    const open = this.open;
    if (!open || !open.quote || !open.quote.allowed || open.busy) return;
    open.key = open.key || newKey();
    open.busy = true;
    this.say(this.t('cancel.cancelling'), 'info');
    this.renderQuote();
    try {
      const answer = await api.cancel(open.bookingId, open.quote.refund, open.key);
      this.open = null;
      this.done = answer;
      this.say('');
      this.cancelled(open.bookingId, answer);
      this.$('cancel-title').focus();
    } catch (err) {
      open.busy = false;
      if (err instanceof ApiError && ['REFUND_WINDOW_CLOSED', 'REFUND_NOT_ALLOWED', 'TICKETS_TRANSFERRED'].includes(err.reason)) {
        // Nothing was cancelled: what cancelling does now, quoted again.
        return this.quote(open.bookingId, this.errorText(err));
      }
      this.say(this.errorText(err));
      this.renderQuote();
    }
  }

  close() {
    const closing = this.open;
    this.open = null;
    this.done = null;
    this.say('');
    this.renderQuote();
    this.$('bookings').hidden = this.$('booking-list').children.length === 0;
    if (closing) document.querySelector(`button.cancel-booking[data-booking="${closing.bookingId}"]`)?.focus();
  }

  say(text, kind = 'bad') {
    const box = this.$('cancel-message');
    box.hidden = !text;
    box.textContent = text || '';
    box.className = `message ${kind === 'bad' ? '' : kind}`;
  }
}

function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `cancel-${Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')}`;
}
