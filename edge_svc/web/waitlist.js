// The event's waiting list, offered where the page says the event is sold
// out: a join form (a section or any, and how many seats, up to the event's
// limit per fan), then the fan's place ("3 ahead of you"), read again every
// few seconds, and once seats come back to them the offer: its seats, its
// price and how long it lasts, with "Buy" (the offer is a hold in the
// fan's name: the page's own checkout pays for it) and "Leave the list".
// The offer's access token is an HttpOnly cookie the edge sets; the page
// never sees it.

import { api, ApiError } from './api.js';

// How often the fan's entry is read again while they wait or hold an offer,
// and after a failed read (at least the edge's Retry-After).
const POLL_MS = 5000;
const RETRY_MS = 10000;
const MAX_QUANTITY = 20;
const WAITING = 'WAITLIST_STATE_WAITING';
const OFFERED = 'WAITLIST_STATE_OFFERED';

export class WaitingList {
  // $: the page's getElementById; i18n(): the current I18n; errorText(err):
  // the page's words for an error; eventId() and event(): the event shown;
  // queue(): makes sure the fan has a place in the event's queue (joining
  // asks for one); buy(hold): opens the page's checkout for the offer's hold.
  constructor({ $, i18n, errorText, eventId, event, queue, buy }) {
    Object.assign(this, { $, i18n, errorText, eventId, event, queue, buy });
    this.panel = $('waitlist');
    this.entry = null; // the fan's entry; null: not on the list (or not read yet)
    this.read = false; // whether the entry was read for this event
    this.readFor = null;
    this.busy = false;
    this.reading = false; // a read of the entry is under way
    this.form = ''; // the language and event the join form was drawn for
    this.timer = 0;
    this.clock = 0;
    this.said = '';
    $('waitlist-form').addEventListener('submit', (e) => {
      e.preventDefault();
      this.join();
    });
    $('waitlist-leave').addEventListener('click', () => this.leave());
    $('waitlist-buy').addEventListener('click', () => {
      const offer = this.entry?.offer;
      if (offer) {
        this.hide();
        this.buy(offer);
      }
    });
  }

  t(key, params) {
    return this.i18n().t(key, params);
  }

  // Where the page says the event is sold out (`soldOut`): the list after
  // `anchor`; elsewhere, nothing.
  offer(soldOut, anchor) {
    if (soldOut) this.show(anchor);
    else this.hide();
  }

  // Shows the list after `anchor` (in the view shown) and keeps the fan's
  // entry current while it is visible; again and again is harmless.
  show(anchor) {
    if (anchor.nextElementSibling !== this.panel) anchor.after(this.panel);
    this.panel.hidden = false;
    if (this.readFor !== this.eventId()) {
      this.readFor = this.eventId();
      this.entry = null;
      this.read = false;
      this.message('');
    }
    this.render();
    // Read once when shown, and again only while something may change (the
    // page shows the list at each of its own updates: no read for each).
    if (!this.timer && !this.reading && (!this.read || this.open())) this.poll();
  }

  open() {
    return !!this.entry && [WAITING, OFFERED].includes(this.entry.state);
  }

  hide() {
    this.panel.hidden = true;
    clearTimeout(this.timer);
    clearInterval(this.clock);
    this.timer = 0;
    this.clock = 0;
  }

  visible() {
    return !this.panel.hidden && !this.panel.closest('.view')?.hidden;
  }

  async poll() {
    clearTimeout(this.timer);
    this.timer = 0;
    if (!this.visible()) return;
    let pause = POLL_MS;
    this.reading = true;
    try {
      this.entry = (await api.waitlistEntry(this.eventId())).entry;
    } catch (err) {
      if (err instanceof ApiError && err.reason === 'WAITLIST_ENTRY_NOT_FOUND') this.entry = null;
      else pause = Math.max(RETRY_MS, ((err instanceof ApiError && err.retryAfter) || 0) * 1000);
    } finally {
      this.reading = false;
    }
    this.read = true;
    this.render();
    // Read again only while something may change: a place or an open offer.
    if (this.open() && this.visible() && !this.timer) this.timer = setTimeout(() => this.poll(), pause);
  }

  async join() {
    if (this.busy) return;
    this.busy = true;
    this.render();
    this.message('');
    const body = { quantity: Number(this.$('waitlist-quantity').value) };
    const section = this.$('waitlist-section').value;
    if (section) body.sectionId = section;
    try {
      await this.queue();
      this.entry = (await api.joinWaitlist(this.eventId(), body)).entry;
      this.said = '';
    } catch (err) {
      this.message(this.errorText(err));
    } finally {
      this.busy = false;
    }
    this.render();
    if (!this.timer && this.open()) this.timer = setTimeout(() => this.poll(), POLL_MS);
  }

  async leave() {
    if (this.busy) return;
    this.busy = true;
    this.render();
    try {
      this.entry = (await api.leaveWaitlist(this.eventId())).entry;
      this.message('');
    } catch (err) {
      this.message(this.errorText(err));
    } finally {
      this.busy = false;
    }
    this.render();
    this.$('waitlist-title').focus();
  }

  message(text) {
    const box = this.$('waitlist-message');
    box.hidden = !text;
    box.textContent = text || '';
  }

  render() {
    if (this.panel.hidden) return;
    const $ = this.$;
    const entry = this.entry;
    const state = entry ? entry.state : '';
    const joinable = this.read && (!entry || ![WAITING, OFFERED].includes(state));
    // The form is drawn when it appears or the language changes, not at each
    // read (a select the fan has open stays open).
    const form = `${this.i18n().lang} ${this.eventId()}`;
    if (joinable && ($('waitlist-form').hidden || this.form !== form)) {
      this.form = form;
      this.renderForm();
    }
    $('waitlist-form').hidden = !joinable;
    $('waitlist-leave').hidden = !entry || ![WAITING, OFFERED].includes(state);
    $('waitlist-leave').disabled = this.busy;
    $('waitlist-join').disabled = this.busy;
    $('waitlist-offer').hidden = state !== OFFERED;
    let status = '';
    if (!this.read) status = this.t('wl.checking');
    else if (!entry) status = this.t('wl.intro');
    else if (state === WAITING) status = this.place(entry);
    else if (state === OFFERED) status = this.t('wl.offered');
    else status = this.t(`wl.state.${state}`);
    // Announced (a polite live region) only when the words change.
    if (status !== this.said) {
      this.said = status;
      $('waitlist-status').textContent = status;
    }
    clearInterval(this.clock);
    this.clock = 0;
    if (state === OFFERED) {
      this.renderOffer(entry.offer);
      this.clock = setInterval(() => this.tick(), 1000);
    }
  }

  place(entry) {
    const ahead = Number(entry.ahead || 0);
    const count = Number(entry.quantity);
    const wish = entry.sectionId
      ? this.t('wl.wish', { count, section: this.sectionName(entry.sectionId) })
      : this.t('wl.wishAny', { count });
    const where = ahead === 0 ? this.t('wl.next') : this.t('wl.ahead', { count: ahead });
    return `${where} ${wish}`;
  }

  sectionName(sectionId) {
    if (!sectionId) return this.t('wl.anySection');
    const section = this.event()?.sections.find((s) => s.sectionId === sectionId);
    return section ? section.displayName : sectionId;
  }

  renderForm() {
    const i18n = this.i18n();
    const sections = this.event()?.sections || [];
    const select = this.$('waitlist-section');
    const chosen = select.value;
    select.replaceChildren(
      option('', this.t('wl.anySection')),
      ...sections.map((s) => option(s.sectionId, `${s.displayName} · ${i18n.money(s.price)}`)),
    );
    select.value = [...select.options].some((o) => o.value === chosen) ? chosen : '';
    const limit = Math.min(Number(this.event()?.maxTicketsPerCustomer) || 4, MAX_QUANTITY);
    const quantity = this.$('waitlist-quantity');
    const was = quantity.value || '1';
    quantity.replaceChildren(...Array.from({ length: limit }, (_, i) => option(String(i + 1), i18n.number(i + 1))));
    quantity.value = Number(was) <= limit ? was : '1';
  }

  renderOffer(offer) {
    const i18n = this.i18n();
    const name = this.sectionName(offer.sectionId);
    const items = offer.seats && offer.seats.length
      ? offer.seats.map((s) => this.t('holdSeat', { section: name, row: s.rowLabel, number: s.seatNumber }))
      : [this.t('holdPlaces', { section: name, count: Number(offer.quantity) })];
    this.$('waitlist-seats').replaceChildren(
      ...items.map((text) => {
        const li = document.createElement('li');
        li.textContent = text;
        return li;
      }),
    );
    this.$('waitlist-amount').textContent = this.t('total', { amount: i18n.money(offer.amount) });
    this.tick();
  }

  tick() {
    const offer = this.entry?.offer;
    if (!offer || this.entry.state !== OFFERED || !this.visible()) {
      clearInterval(this.clock);
      this.clock = 0;
      return;
    }
    const left = (new Date(offer.expiresAt).getTime() - Date.now()) / 1000;
    const el = this.$('waitlist-countdown');
    el.textContent = this.t('wl.endsIn', { time: this.i18n().clock(left) });
    el.classList.toggle('low', left < 60);
    this.$('waitlist-buy').disabled = left <= 0;
    if (left <= 0) {
      // Lapsed: the next read says so (and the seats went to the next fan).
      clearInterval(this.clock);
      this.clock = 0;
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.poll(), 1000);
    }
  }
}

function option(value, text) {
  const el = document.createElement('option');
  el.value = value;
  el.textContent = text;
  return el;
}
