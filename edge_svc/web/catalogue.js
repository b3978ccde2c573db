// The home page's catalogue: upcoming events and flights from GET /v1/events,
// a word search, a flight search (from, to, date) and pages. The search is
// kept in the address (?q=...&origin=...), so a result list can be linked,
// reloaded and left with the Back button; page tokens stay in memory.

import { call } from './api.js';

const FILTERS = ['q', 'kind', 'origin', 'destination', 'date'];

export class Catalogue {
  // i18n: the page's current catalog (it changes with the language).
  constructor({ i18n, $ }) {
    this.i18n = i18n;
    this.t = (key, params) => i18n().t(key, params);
    this.$ = $;
    this.reply = null;
    this.tokens = []; // the tokens of the pages before this one ('' for the first)
    this.token = '';
    this.loading = false;
  }

  start() {
    const $ = this.$;
    this.fill(new URLSearchParams(window.location.search));
    $('search-form').addEventListener('submit', (e) => {
      e.preventDefault();
      this.search({ q: $('search-q').value.trim() });
    });
    $('flight-form').addEventListener('submit', (e) => {
      e.preventDefault();
      this.search({
        kind: 'flight',
        origin: $('flight-from').value.trim().toUpperCase(),
        destination: $('flight-to').value.trim().toUpperCase(),
        date: $('flight-date').value,
      });
    });
    $('page-next').addEventListener('click', () => this.page(this.reply.nextPageToken, true));
    $('page-prev').addEventListener('click', () => this.page(this.tokens.pop() || '', false));
    window.addEventListener('popstate', () => {
      this.fill(new URLSearchParams(window.location.search));
      this.page('', null);
    });
    return this.page('', null);
  }

  // The form fields from the address.
  fill(params) {
    const $ = this.$;
    $('search-q').value = params.get('q') || '';
    $('flight-from').value = params.get('origin') || '';
    $('flight-to').value = params.get('destination') || '';
    $('flight-date').value = params.get('date') || '';
  }

  search(filters) {
    const params = new URLSearchParams();
    for (const name of FILTERS) if (filters[name]) params.set(name, filters[name]);
    const query = params.toString();
    window.history.pushState(null, '', query ? `/?${query}` : '/');
    return this.page('', null);
  }

  // forward: true (next page), false (previous page), null (a new search).
  async page(token, forward) {
    if (forward === true) this.tokens.push(this.token);
    if (forward === null) this.tokens = [];
    this.token = token;
    const params = new URLSearchParams();
    const here = new URLSearchParams(window.location.search);
    for (const name of FILTERS) if (here.get(name)) params.set(name, here.get(name));
    if (token) params.set('pageToken', token);
    const status = this.$('results-status');
    status.textContent = this.t('cat.loading');
    this.loading = true;
    try {
      this.reply = await call('GET', `/v1/events${params.toString() ? `?${params}` : ''}`);
    } catch (err) {
      this.reply = { events: [], nextPageToken: '', error: err.message };
    }
    this.loading = false;
    this.render();
    if (forward !== null) this.$('results-title').focus?.();
  }

  render() {
    const $ = this.$;
    const reply = this.reply;
    if (!reply) return;
    const events = reply.events || [];
    $('results').replaceChildren(...events.map((e) => this.item(e)));
    $('results-status').textContent = reply.error
      ? reply.error
      : events.length
        ? this.t('cat.count', { count: events.length })
        : this.t('cat.none');
    $('page-next').hidden = !reply.nextPageToken;
    $('page-prev').hidden = this.tokens.length === 0;
  }

  item(event) {
    const t = this.t;
    const i18n = this.i18n();
    const li = document.createElement('li');
    li.className = 'listing';
    const title = document.createElement('h3');
    const link = document.createElement('a');
    link.href = `/e/${encodeURIComponent(event.eventId)}`;
    link.textContent = event.displayName;
    title.append(link);
    const lines = [i18n.dateTime(event.startsAt, event.timeZone)];
    if (event.flight) {
      const f = event.flight;
      lines.push(t('cat.flight', { code: f.flightCode, origin: f.origin, destination: f.destination }));
      if (f.arrivesAt) lines.push(t('cat.arrives', { when: i18n.dateTime(f.arrivesAt, event.timeZone) }));
    } else if (event.venue) {
      lines.push(`${event.venue.displayName}, ${event.venue.city}`);
    }
    if (event.lowestPrice) lines.push(t('cat.fromPrice', { price: i18n.money(event.lowestPrice) }));
    const state = (event.availability || '').replace('EVENT_AVAILABILITY_', '');
    const badge = document.createElement('p');
    badge.className = `state ${state === 'SOLD_OUT' ? 'soldout' : state === 'ON_SALE' ? 'open' : ''}`;
    badge.textContent =
      state === 'NOT_YET_ON_SALE' && event.saleOpensAt
        ? t('cat.onSaleAt', { when: i18n.dateTime(event.saleOpensAt, event.timeZone) })
        : t(`avail.${state}`);
    li.append(title, ...lines.map((text) => Object.assign(document.createElement('p'), { textContent: text })), badge);
    return li;
  }
}
