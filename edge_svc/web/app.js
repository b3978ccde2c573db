// The fan's page: the event, the waiting room, the seat map, the hold,
// payment and tickets, one view at a time, each drawn from the API. No
// token is ever in a URL or in storage: the session and the access token
// are HttpOnly cookies the edge sets. Only the language choice, the open
// hold's id and payment idempotency keys are kept in the browser.
//
// This module starts the page and shows one view at a time; each view is
// a module of its own (event.js, room.js, shop.js, checkout.js,
// tickets.js), made here with the page they share (page.js).

import { api } from './api.js';
import { startLanguage } from './i18n.js';
import { Catalogue } from './catalogue.js';
import { newPage, SIGNED_OUT } from './page.js';
import { eventView } from './event.js';
import { roomView } from './room.js';
import { shopView } from './shop.js';
import { checkoutView } from './checkout.js';
import { ticketsView } from './tickets.js';
import { WaitingList } from './waitlist.js';

const config = JSON.parse(document.querySelector('meta[name="bo-config"]').content);
const VIEWS = ['home', 'event', 'waiting', 'shop', 'hold', 'tickets', 'claim'];

const page = newPage(config);
const { state, $, t, errorText } = page;
const catalogue = new Catalogue({ i18n: () => state.i18n, $ });
const event = eventView(page);
const room = roomView(page);
const shop = shopView(page);
const checkout = checkoutView(page);
const tickets = ticketsView(page);
// The event's waiting list, offered where the event or the room is sold out;
// its offer is a hold in the fan's name, paid for as any hold.
const waitlist = new WaitingList({
  $,
  i18n: () => state.i18n,
  errorText,
  eventId: () => state.eventId,
  event: () => state.event,
  // The list is for fans with a place in the queue: one who has none takes one.
  queue: async () => {
    const { position } = await api.position(state.eventId);
    if (position.state === 'QUEUE_STATE_NOT_IN_QUEUE') await event.joinQueue();
  },
  buy: (offer) => {
    page.session('hold', offer.holdId);
    checkout.open(offer);
  },
});
// The views' ways into each other.
Object.assign(page, {
  show,
  render,
  resume,
  openEvent: event.open,
  joinQueue: event.joinQueue,
  soldOut: event.soldOut,
  enterWaiting: room.enter,
  admitted: room.admitted,
  backToQueue: room.backToQueue,
  openShop: shop.open,
  openHold: checkout.open,
  openTickets: tickets.open,
  shownTickets: tickets.shown,
  waitlist,
});

function show(view) {
  if (state.view !== view && state.view === 'waiting' && state.waiting) {
    state.waiting.stop();
    state.waiting = null;
  }
  if (state.view === 'hold' && view !== 'hold') clearInterval(state.countdown);
  const moved = state.view !== view;
  state.view = view;
  $('loading').hidden = true;
  for (const name of VIEWS) $(`view-${name}`).hidden = name !== view;
  document.body.dataset.view = view;
  render();
  if (moved) {
    const heading = document.querySelector(`#view-${view} h1`);
    document.title = `${heading ? heading.textContent : ''} · ${t('brand')}`;
    $('main').focus({ preventScroll: true });
  }
}

function render() {
  const i18n = state.i18n;
  i18n.apply(document);
  for (const el of document.querySelectorAll('.event-name')) el.textContent = state.event ? state.event.displayName : '';
  $('sign-out').hidden = !state.me;
  $('who').textContent = state.me ? t('signedInAs', { name: state.me }) : '';
  const renderers = {
    home: () => catalogue.render(),
    event: event.render,
    waiting: room.render,
    shop: shop.render,
    hold: checkout.render,
    tickets: tickets.render,
    claim: () => state.claim?.draw(),
  };
  if (renderers[state.view]) renderers[state.view]();
  if (state.view) {
    const heading = document.querySelector(`#view-${state.view} h1`);
    if (heading && heading.textContent) document.title = `${heading.textContent} · ${t('brand')}`;
  }
}

// -- start ---------------------------------------------------------------------------

async function resume(read) {
  let position;
  try {
    position = (await (read || api.position(state.eventId))).position;
  } catch (err) {
    if (SIGNED_OUT.has(err.reason)) state.me = null;
    return event.open(SIGNED_OUT.has(err.reason) ? '' : errorText(err));
  }
  if (position.state === 'QUEUE_STATE_WAITING') return room.enter(position);
  if (position.state === 'QUEUE_STATE_ADMITTED') return room.admitted();
  return event.open();
}

async function start() {
  // The catalog and the fan's state are read at once, not one after another.
  const match = /^\/e\/([0-9]{1,19})\/?$/.exec(window.location.pathname);
  state.eventId = match ? match[1] : null;
  event.takeStaffPass();
  tickets.start();
  const language = startLanguage(config, $('lang'), (i18n) => {
    state.i18n = i18n;
    render();
    if (state.view === 'tickets') tickets.render();
    if (state.view === 'shop' && state.map && $('map-focus').textContent) state.map.announce();
  }).then((i18n) => {
    state.i18n = i18n;
  });
  const eventRead = match ? api.event(state.eventId).then((r) => r.event) : null;
  const sessionRead = match ? api.session().then((r) => r.customerId, () => null) : null;
  // The fan's place once someone is signed in (read for nobody, it is a 401 the browser logs).
  const positionRead = sessionRead ? sessionRead.then((me) => (me ? api.position(state.eventId) : null)) : null;
  positionRead?.catch(() => null);
  eventRead?.catch(() => null);
  event.listen();
  room.listen();
  shop.listen();
  checkout.listen();
  $('sign-out').addEventListener('click', async () => {
    await api.signOut().catch(() => null);
    state.me = null;
    window.location.reload();
  });

  if (window.location.pathname === '/claim') {
    await language;
    await tickets.openClaim();
    return;
  }
  if (!match) {
    await language;
    show('home');
    await catalogue.start();
    return;
  }
  await language;
  let found;
  try {
    found = await eventRead;
  } catch (err) {
    show('home');
    const p = document.createElement('p');
    p.className = 'message';
    p.setAttribute('role', 'alert');
    p.textContent = errorText(err);
    $('search-form').before(p);
    await catalogue.start();
    return;
  }
  state.event = found;
  state.me = await sessionRead;
  if (!state.me) {
    event.open();
    return;
  }
  await resume(positionRead);
}

start();
