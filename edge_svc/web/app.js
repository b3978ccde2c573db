// The fan's page: the event, the waiting room, the seat map, the hold,
// payment and tickets, one view at a time, each drawn from the API. No
// token is ever in a URL or in storage: the session and the access token
// are HttpOnly cookies the edge sets. Only the language choice, the open
// hold's id and payment idempotency keys are kept in the browser.

import { api, ApiError, seconds } from './api.js';
import { roundAhead, startLanguage } from './i18n.js';
import { Waiting } from './waiting.js';
import { Catalogue } from './catalogue.js';
import { Cancellations } from './cancel.js';
import { fromBase64, rotatingCode, rotationStep } from './codes.js';

const config = JSON.parse(document.querySelector('meta[name="bo-config"]').content);
const $ = (id) => document.getElementById(id);
const VIEWS = ['home', 'event', 'waiting', 'shop', 'hold', 'tickets', 'claim'];
const CARDS = ['pm_card_ok', 'pm_card_declined', 'pm_card_fail', 'pm_card_timeout'];
const BACK_TO_QUEUE = new Set(['TOKEN_EXPIRED', 'SESSION_ENDED', 'TOKEN_MISSING', 'TOKEN_INVALID', 'TOKEN_UNKNOWN_KEY']);
const SIGNED_OUT = new Set(['NOT_SIGNED_IN', 'SESSION_INVALID']);
// Answers of a confirmation that mean "not settled yet: ask again with the same key".
const SLOW = new Set([
  'PROVIDER_TIMEOUT',
  'PAYMENT_PROCESSING',
  'IDEMPOTENCY_KEY_IN_FLIGHT',
  'CONFIRMATION_IN_FLIGHT',
  'DEADLINE_EXCEEDED',
  'UPSTREAM_FAILED',
  'NETWORK',
]);

const state = {
  i18n: null,
  view: null,
  eventId: null,
  event: null,
  me: null,
  fanDraw: null, // the fan's part in the event's verified-fan draw, if it has one
  staffPass: null, // from a staff link
  waiting: null,
  position: null,
  shown: null, // the rounded place last announced
  seatMap: null,
  map: null,
  section: null,
  hold: null,
  countdown: 0,
  tickets: [],
  // Ticket id -> its rotation ({code, secret, stepSeconds}), or null where
  // the page shows the static code (the rotation could not be fetched).
  rotations: new Map(),
  rotationTimer: null,
  ticketsDown: false, // the ticket list could not be read (PaymentService down)
  cancelled: new Set(), // bookings cancelled here (their tickets are voided a moment later)
  notice: null,
  claim: null, // the claim page, once open
};

const t = (key, params) => state.i18n.t(key, params);
const catalogue = new Catalogue({ i18n: () => state.i18n, $ });
let cancellations = null; // made once the page's elements are there (start)

function store(kind) {
  return `bo.${kind}.${state.eventId}`;
}

function session(kind, value) {
  try {
    if (value === undefined) return sessionStorage.getItem(store(kind));
    if (value === null) sessionStorage.removeItem(store(kind));
    else sessionStorage.setItem(store(kind), value);
  } catch {
    return null;
  }
  return null;
}

// -- views ----------------------------------------------------------------

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
    event: renderEvent,
    waiting: renderWaiting,
    shop: renderShop,
    hold: renderHold,
    tickets: renderTickets,
    claim: () => state.claim?.draw(),
  };
  if (renderers[state.view]) renderers[state.view]();
  if (state.view) {
    const heading = document.querySelector(`#view-${state.view} h1`);
    if (heading && heading.textContent) document.title = `${heading.textContent} · ${t('brand')}`;
  }
}

function message(id, text, kind = 'bad') {
  const box = $(id);
  box.hidden = !text;
  box.textContent = text || '';
  box.className = `message ${kind === 'bad' ? '' : kind}`;
}

function errorText(err) {
  const reason = err instanceof ApiError ? err.reason : '';
  const known = reason && state.i18n.messages[`error.${reason}`];
  if (known) {
    const opens = err.metadata.opens_at ? state.i18n.dateTime(err.metadata.opens_at) : '';
    return t(`error.${reason}`, { ...err.metadata, opens_at: opens, retry: err.retryAfter || 1 });
  }
  if (err instanceof ApiError && err.status === 0) return t('error.NETWORK');
  return t('error.unknown', { message: err.message || String(err) });
}

// -- the event --------------------------------------------------------------

function kindName(section) {
  return section.kind === 'SECTION_KIND_GENERAL_ADMISSION' ? t('standing') : t('seated');
}

function left(section) {
  return Math.max(0, Number(section.capacity) + Number(section.overbookLimit || 0) - Number(section.sold) - Number(section.held));
}

function soldOut() {
  return !!state.event && state.event.sections.every((s) => left(s) === 0);
}

function renderEvent() {
  const event = state.event;
  if (!event) return;
  $('event-title').textContent = event.displayName;
  $('event-when').textContent = state.i18n.dateTime(event.startsAt, event.timeZone);
  const body = $('sections-body');
  body.replaceChildren(
    ...event.sections.map((s) => {
      const tr = document.createElement('tr');
      const cells = [s.displayName, kindName(s), state.i18n.money(s.price), state.i18n.number(left(s))];
      cells.forEach((text, i) => {
        const cell = document.createElement(i === 0 ? 'th' : 'td');
        if (i === 0) cell.scope = 'row';
        if (i >= 2) cell.className = 'num';
        cell.textContent = text;
        tr.append(cell);
      });
      return tr;
    }),
  );
  $('sign-in').hidden = !!state.me || !config.devSignIn;
  $('sign-in-needed').hidden = !!state.me || config.devSignIn;
  $('join').hidden = !state.me;
  $('code-row').hidden = !state.me || !!state.staffPass;
  $('staff-note').hidden = !state.me || !state.staffPass;
  $('join').disabled = soldOut();
  $('show-tickets').hidden = !state.me || state.tickets.length === 0;
  renderFanDraw();
}

async function openEvent(notice) {
  show('event');
  $('view-event').querySelector('.message')?.remove();
  if (notice) {
    const box = document.createElement('p');
    box.className = 'message info';
    box.setAttribute('role', 'status');
    box.textContent = notice;
    $('event-when').after(box);
  }
  if (state.me) {
    try {
      // Void tickets (a cancelled booking's) are not the fan's any more.
      state.tickets = shownTickets((await api.tickets(state.eventId)).tickets || []);
    } catch {
      state.tickets = [];
    }
    await loadFanDraw();
    renderEvent();
  }
}

async function signIn(event) {
  event.preventDefault();
  const name = $('sign-in-name').value.trim();
  if (!name) return;
  try {
    state.me = (await api.signIn(name)).customerId;
    await resume();
  } catch (err) {
    openEvent(errorText(err));
  }
}

// The edge's bot defence: when a join needs a proof of work, a worker finds
// it (off the main thread) and the join is sent again with it.
function prove(challenge, bits) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./pow.js', import.meta.url));
    worker.onmessage = (e) => {
      worker.terminate();
      resolve(e.data.proof);
    };
    worker.onerror = (e) => {
      worker.terminate();
      reject(e);
    };
    worker.postMessage({ challenge, bits });
  });
}

// The event's verified-fan draw, when it has one: register while it is
// open, then the result; a winner's code goes into the code field.
async function loadFanDraw() {
  try {
    state.fanDraw = await api.fanDraw(state.eventId);
  } catch {
    state.fanDraw = null;
  }
  renderFanDraw();
}

function renderFanDraw() {
  const draw = state.fanDraw;
  $('fan-draw').hidden = !draw || !state.me;
  if (!draw) return;
  const closes = state.i18n.dateTime(draw.closesAt);
  const open = Date.parse(draw.closesAt) > Date.now();
  const outcome = {
    FAN_DRAW_OUTCOME_NOT_REGISTERED: open ? ['draw.open', true] : ['draw.closed', false],
    FAN_DRAW_OUTCOME_REGISTERED: ['draw.registered', false],
    FAN_DRAW_OUTCOME_WON: ['draw.won', false],
    FAN_DRAW_OUTCOME_NOT_DRAWN: ['draw.lost', false],
  }[draw.outcome] || ['draw.closed', false];
  $('fan-draw-text').textContent = t(outcome[0], { closes, code: draw.accessCode || '' });
  $('fan-draw-register').hidden = !outcome[1];
  if (draw.accessCode && !$('access-code').value) $('access-code').value = draw.accessCode;
}

async function registerForFanDraw() {
  $('fan-draw-register').disabled = true;
  try {
    await api.registerForFanDraw(state.eventId);
    await loadFanDraw();
  } catch (err) {
    $('fan-draw-text').textContent = errorText(err);
  } finally {
    $('fan-draw-register').disabled = false;
  }
}

// The way into a lane: a code the fan types, or the staff pass of a staff
// link (taken out of the address bar as soon as the page reads it).
function door() {
  const code = $('access-code').value.trim();
  if (state.staffPass) return { staffPass: state.staffPass };
  return code ? { accessCode: code } : {};
}

function takeStaffPass() {
  const url = new URL(window.location.href);
  const pass = url.searchParams.get('staff');
  if (!pass) return;
  state.staffPass = pass;
  url.searchParams.delete('staff');
  window.history.replaceState(window.history.state, '', url.pathname + url.search + url.hash);
}

async function joinQueue() {
  try {
    return await api.join(state.eventId, null, door());
  } catch (err) {
    if (err.reason !== 'PROOF_REQUIRED' && err.reason !== 'PROOF_INVALID') throw err;
    const asked = await api.challenge(state.eventId);
    if (asked.kind !== 'proof-of-work') throw err;
    $('join-status').textContent = t('proving');
    const proof = await prove(asked.challenge, asked.difficultyBits);
    return api.join(state.eventId, proof, door());
  } finally {
    $('join-status').textContent = '';
  }
}

async function join() {
  $('join').disabled = true;
  try {
    const { position } = await joinQueue();
    if (position.state === 'QUEUE_STATE_ADMITTED') await admitted();
    else enterWaiting(position);
  } catch (err) {
    if (SIGNED_OUT.has(err.reason)) {
      state.me = null;
    }
    openEvent(errorText(err));
  } finally {
    $('join').disabled = false;
  }
}

// -- the waiting room -----------------------------------------------------------

const ROOM = {
  ADMISSION_STATE_PRE_QUEUE: ['room.preQueue', ''],
  ADMISSION_STATE_OPEN: ['room.open', 'open'],
  ADMISSION_STATE_PAUSED: ['room.paused', 'paused'],
  ADMISSION_STATE_SOLD_OUT: ['room.soldOut', 'soldout'],
};

function enterWaiting(position) {
  state.position = position;
  state.shown = null;
  state.link = null;
  show('waiting');
  const waiting = new Waiting(state.eventId, {
    onPosition: (p) => {
      state.position = { ...state.position, ...p };
      renderWaiting();
    },
    onAdmitted: () => admitted(),
    onEnded: (why) => {
      state.waiting = null;
      if (SIGNED_OUT.has(why)) state.me = null;
      openEvent(t('queueEnded'));
    },
    onLink: (link) => {
      state.link = link;
      renderWaiting();
    },
  });
  state.waiting = waiting;
  waiting.lane = position.lane || '';
  waiting.start();
  // The event's counters (public and cached by the CDN) tell when it sells out.
  clearInterval(state.eventRefresh);
  state.eventRefresh = setInterval(async () => {
    if (state.view !== 'waiting') {
      clearInterval(state.eventRefresh);
      return;
    }
    try {
      state.event = (await api.event(state.eventId)).event;
      renderWaiting();
    } catch {
      // The next refresh will do.
    }
  }, 30000);
}

function renderWaiting() {
  const p = state.position;
  if (!p) return;
  const ahead = Number(p.ahead || 0);
  const max = Math.max(ahead, Number(session('maxAhead') || 0));
  session('maxAhead', String(max));
  const rounded = roundAhead(ahead);
  const text =
    ahead === 0 ? t('place.next') : rounded === ahead ? t('place.exact', { count: ahead }) : t('place.about', { count: rounded });
  // Announced (aria-live) only when the figure a fan reads changes.
  if (state.shown !== text) {
    state.shown = text;
    $('place').textContent = text;
  }
  const eta = seconds(p.eta);
  $('eta').textContent = eta === null ? t('eta.unknown') : eta < 60 ? t('eta.soon') : t('eta.minutes', { minutes: state.i18n.minutes(Math.ceil(eta / 60)) });
  const done = max === 0 ? 0 : Math.round(((max - ahead) / max) * 100);
  $('progress').value = done;
  $('progress').textContent = `${done}%`;
  const roomSoldOut = p.admissionState === 'ADMISSION_STATE_SOLD_OUT';
  const [key, cls] = soldOut() ? ['room.soldOut', 'soldout'] : ROOM[p.admissionState] || ['room.open', 'open'];
  $('sold-out').hidden = !roomSoldOut;
  $('live').textContent = state.link ? t(`link.${state.link}`) : '';
  const room = $('room-state');
  room.textContent = t(key);
  room.className = `state ${cls}`;
}

async function leave() {
  try {
    await api.leave(state.eventId);
  } catch {
    // Leaving twice, or after the session ended, is still leaving.
  }
  session('hold', null);
  session('maxAhead', null);
  openEvent(t('left'));
}

async function admitted() {
  session('maxAhead', null);
  const holdId = session('hold');
  if (holdId) {
    try {
      const { hold } = await api.getHold(holdId);
      if (hold.state === 'HOLD_STATE_HELD') return openHold(hold);
      if (hold.state === 'HOLD_STATE_CONFIRMED') return openTickets(hold);
    } catch {
      // Gone: choose again.
    }
    session('hold', null);
  }
  return openShop();
}

async function backToQueue(reason) {
  session('hold', null);
  try {
    const { position } = await joinQueue();
    if (position.state === 'QUEUE_STATE_ADMITTED') return openShop(t(`error.${reason}`));
    enterWaiting(position);
    return undefined;
  } catch (err) {
    return openEvent(errorText(err));
  }
}

// -- choosing seats -------------------------------------------------------------

async function loadSeatMap() {
  state.seatMap = await api.seatMap(state.eventId);
}

async function openShop(notice) {
  show('shop');
  message('shop-message', notice || '', 'info');
  try {
    await loadSeatMap();
  } catch (err) {
    message('shop-message', errorText(err));
    return;
  }
  if (!state.map) {
    const { SeatMap } = await import('./seatmap.js');
    state.map = new SeatMap($('map'), {
      describe: (seat, seatState, problem) => {
        const base = t(`seat.${seatState}`, { row: seat.row, number: seat.number });
        $('map-focus').textContent = problem ? `${base} ${t(`seat.problem.${problem}`)}` : base;
      },
      onChange: () => renderPicked(),
    });
  }
  const sections = state.seatMap.sections || [];
  if (!state.section || !sections.some((s) => s.section.sectionId === state.section)) {
    const first = sections.find((s) => s.available > 0) || sections[0];
    state.section = first ? first.section.sectionId : null;
  }
  renderShop();
  showSection();
}

function currentSection() {
  return (state.seatMap?.sections || []).find((s) => s.section.sectionId === state.section);
}

function renderShop() {
  if (!state.seatMap) return;
  const choice = $('section-choice');
  choice.replaceChildren(
    ...state.seatMap.sections.map((s) => {
      const label = document.createElement('label');
      const input = document.createElement('input');
      input.type = 'radio';
      input.name = 'section';
      input.value = s.section.sectionId;
      input.checked = s.section.sectionId === state.section;
      input.addEventListener('change', () => {
        state.section = input.value;
        state.map?.clear();
        showSection();
      });
      const text = document.createElement('span');
      text.textContent = t('sectionChoice', {
        name: s.section.displayName,
        price: state.i18n.money(s.section.price),
        count: Number(s.available || 0),
      });
      label.append(input, text);
      return label;
    }),
  );
  for (const id of ['best-qty', 'ga-qty']) {
    const select = $(id);
    const was = select.value || '2';
    select.replaceChildren(
      ...[1, 2, 3, 4].map((n) => {
        const option = document.createElement('option');
        option.value = String(n);
        option.textContent = state.i18n.number(n);
        return option;
      }),
    );
    select.value = was;
  }
  renderPicked();
}

function showSection() {
  const s = currentSection();
  const seated = !!s && s.section.kind !== 'SECTION_KIND_GENERAL_ADMISSION';
  $('seated').hidden = !seated;
  $('standing').hidden = !s || seated;
  if (seated) state.map.show(s);
}

function renderPicked() {
  const picked = state.map ? state.map.selected() : [];
  $('picked').textContent = picked.length
    ? t('picked', { count: picked.length, seats: picked.map((p) => p.label).join(', ') })
    : t('pickedNone');
  $('hold-picked').disabled = picked.length === 0;
  $('clear-picked').disabled = picked.length === 0;
}

async function hold(body) {
  message('shop-message', '');
  for (const id of ['hold-picked', 'hold-best', 'hold-ga']) $(id).disabled = true;
  try {
    const { hold: held } = await api.hold(state.eventId, { ...body, requestId: crypto.randomUUID() });
    session('hold', held.holdId);
    state.map?.clear();
    openHold(held);
  } catch (err) {
    if (BACK_TO_QUEUE.has(err.reason)) return backToQueue(err.reason);
    if (err.reason === 'SEAT_UNAVAILABLE') {
      const ids = String(err.metadata.seat_ids || '').split(',').filter(Boolean);
      const labels = state.map.markTaken(ids);
      message('shop-message', t('error.SEAT_UNAVAILABLE', { count: labels.length, seats: labels.join(', ') }));
    } else {
      message('shop-message', errorText(err));
    }
    try {
      await loadSeatMap();
      renderShop();
      showSection();
    } catch {
      // The map stays as it was, with the taken seats marked.
    }
  } finally {
    $('hold-best').disabled = false;
    $('hold-ga').disabled = false;
    renderPicked();
  }
  return undefined;
}

// -- the hold and payment ---------------------------------------------------------

function openHold(held) {
  state.hold = held;
  show('hold');
  message('pay-message', '');
  $('pay-status').textContent = '';
  $('pay').disabled = false;
  clearInterval(state.countdown);
  state.warned = false;
  state.countdown = setInterval(tick, 1000);
  tick();
}

function renderHold() {
  const h = state.hold;
  if (!h) return;
  const section = state.event?.sections.find((s) => s.sectionId === h.sectionId);
  const name = section ? section.displayName : h.sectionId;
  const items = h.seats && h.seats.length
    ? h.seats.map((s) => t('holdSeat', { section: name, row: s.rowLabel, number: s.seatNumber }))
    : [t('holdPlaces', { section: name, count: Number(h.quantity) })];
  $('hold-seats').replaceChildren(
    ...items.map((text) => {
      const li = document.createElement('li');
      li.textContent = text;
      return li;
    }),
  );
  $('hold-amount').textContent = t('total', { amount: state.i18n.money(h.amount) });
  const cards = $('cards');
  const chosen = cards.querySelector('input:checked')?.value || CARDS[0];
  cards.replaceChildren(
    ...CARDS.map((card) => {
      const label = document.createElement('label');
      const input = document.createElement('input');
      input.type = 'radio';
      input.name = 'card';
      input.value = card;
      input.checked = card === chosen;
      const text = document.createElement('span');
      text.textContent = t(`card.${card}`);
      label.append(input, text);
      return label;
    }),
  );
  tick();
}

function tick() {
  const h = state.hold;
  if (!h || state.view !== 'hold') return;
  const leftSeconds = (new Date(h.expiresAt).getTime() - Date.now()) / 1000;
  const el = $('countdown');
  el.textContent = t('expiresIn', { time: state.i18n.clock(leftSeconds) });
  el.classList.toggle('low', leftSeconds < 60);
  if (leftSeconds < 60 && !state.warned) {
    state.warned = true;
    $('countdown-alert').textContent = t('oneMinute');
  }
  if (leftSeconds <= 0 && !state.paying) {
    clearInterval(state.countdown);
    session('hold', null);
    openShop(t('error.HOLD_EXPIRED'));
  }
}

async function release() {
  const h = state.hold;
  try {
    await api.release(h.holdId);
  } catch (err) {
    if (BACK_TO_QUEUE.has(err.reason)) return backToQueue(err.reason);
  }
  session('hold', null);
  return openShop(t('released'));
}

function confirmKey(paymentId) {
  const name = `key.${paymentId}`;
  let key = session(name);
  if (!key) {
    key = crypto.randomUUID();
    session(name, key);
  }
  return key;
}

const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function pay(event) {
  event.preventDefault();
  const h = state.hold;
  const card = $('cards').querySelector('input:checked')?.value || CARDS[0];
  $('pay').disabled = true;
  message('pay-message', '');
  $('pay-status').textContent = t('paying');
  state.paying = true;
  // A bank that takes its time: say so while the answer is awaited.
  const slow = setTimeout(() => {
    $('pay-status').textContent = t('slowBank');
  }, 3000);
  try {
    const { payment } = await api.startPayment(h.holdId, card);
    await settle(payment, slow);
  } catch (err) {
    clearTimeout(slow);
    payError(err);
  } finally {
    state.paying = false;
  }
}

async function settle(started, slow) {
  let payment = started;
  const key = confirmKey(payment.paymentId);
  // Money in flight settles by itself (the server keeps asking the bank):
  // the page keeps asking too, less often after a while, until the outcome
  // comes or the fan leaves the hold's view.
  for (let attempt = 0; state.view === 'hold'; attempt++) {
    try {
      payment = (await api.confirm(payment.paymentId, key)).payment;
    } catch (err) {
      if (SLOW.has(err.reason)) {
        clearTimeout(slow);
        $('pay-status').textContent = t(err.reason === 'PAYMENT_PROCESSING' ? 'pay.processing' : 'slowBank');
        await wait(attempt < 40 ? 2000 : 10000);
        try {
          payment = (await api.payment(payment.paymentId)).payment;
        } catch {
          // Ask again next round.
        }
        if (payment.state !== 'PAYMENT_STATE_PENDING' && payment.state !== 'PAYMENT_STATE_CAPTURED') break;
        continue;
      }
      throw err;
    }
    if (payment.state !== 'PAYMENT_STATE_PENDING') break;
    await wait(1500);
  }
  clearTimeout(slow);
  return paid(payment);
}

async function paid(payment) {
  const s = payment.state;
  if (s === 'PAYMENT_STATE_SUCCEEDED') {
    $('pay-status').textContent = t('issuing');
    return openTickets(state.hold);
  }
  $('pay').disabled = false;
  $('pay-status').textContent = '';
  if (s === 'PAYMENT_STATE_DECLINED') return message('pay-message', t('pay.declined'));
  if (s === 'PAYMENT_STATE_FAILED') return message('pay-message', t('pay.failed'));
  if (['PAYMENT_STATE_REFUND_REQUIRED', 'PAYMENT_STATE_REFUNDED', 'PAYMENT_STATE_PARTIALLY_REFUNDED'].includes(s)) {
    session('hold', null);
    $('pay').disabled = true;
    return message('pay-message', t('pay.late', { amount: state.i18n.money(payment.amount) }));
  }
  return message('pay-message', t('pay.pending'), 'info');
}

function payError(err) {
  $('pay-status').textContent = '';
  $('pay').disabled = false;
  if (BACK_TO_QUEUE.has(err.reason)) return backToQueue(err.reason);
  if (['HOLD_EXPIRED', 'HOLD_NOT_HELD', 'NOT_FOUND'].includes(err.reason)) {
    session('hold', null);
    return openShop(t('error.HOLD_EXPIRED'));
  }
  return message('pay-message', errorText(err));
}

// -- tickets -----------------------------------------------------------------------

async function openTickets(held) {
  let tickets = [];
  let down = null;
  for (let attempt = 0; attempt < 60; attempt++) {
    try {
      tickets = (await api.tickets(state.eventId)).tickets || [];
      down = null;
    } catch (err) {
      tickets = [];
      // The ticket list cannot be read now: say so at once, not after a minute.
      if (err instanceof ApiError && err.reason === 'TICKETS_UNAVAILABLE') {
        down = err;
        break;
      }
    }
    const mine = held ? tickets.filter((tk) => tk.holdId === held.holdId) : tickets;
    if (!held || mine.length >= Number(held.quantity || 1)) break;
    await wait(1000);
  }
  if (held) {
    session('hold', null);
    // Done shopping: the place goes to the next fan in the queue.
    try {
      await api.leave(state.eventId);
    } catch {
      // Already ended.
    }
  }
  state.ticketsDown = down !== null;
  state.tickets = shownTickets(tickets);
  show('tickets');
  if (down) await ticketsWhenBack(held, down.retryAfter);
}

function shownTickets(tickets) {
  return tickets
    .filter((tk) => tk.state !== 'TICKET_STATE_VOID' && !state.cancelled.has(tk.holdId))
    .sort((a, b) => a.sectionId.localeCompare(b.sectionId) || Number(a.seatId || 0) - Number(b.seatId || 0) || a.unit - b.unit);
}

// While the ticket list cannot be read, the page says why and asks again
// at the pace the edge sets; the tickets appear once it answers.
async function ticketsWhenBack(held, retrySeconds) {
  let pause = Math.max(retrySeconds || 0, 2);
  while (state.view === 'tickets' && state.ticketsDown) {
    await wait(pause * 1000);
    if (state.view !== 'tickets') return;
    try {
      const tickets = (await api.tickets(state.eventId)).tickets || [];
      const mine = held ? tickets.filter((tk) => tk.holdId === held.holdId) : tickets;
      if (held && mine.length < Number(held.quantity || 1)) continue;
      state.ticketsDown = false;
      state.tickets = shownTickets(tickets);
      render();
    } catch (err) {
      pause = Math.max((err instanceof ApiError && err.retryAfter) || pause, 2);
    }
  }
}

// After a transfer is made or withdrawn: the list as it is now.
async function reloadTickets() {
  state.tickets = shownTickets((await api.tickets(state.eventId)).tickets || []);
  renderTickets();
}

// The page a transfer's claim link opens.
async function openClaim() {
  const [{ startClaim }, me] = await Promise.all([import('./transfer.js'), api.session().then((r) => r.customerId, () => null)]);
  state.me = me;
  show('claim');
  state.claim = startClaim({
    $,
    t,
    errorText,
    me: () => state.me,
    devSignIn: config.devSignIn,
    signIn: async (name) => {
      state.me = (await api.signIn(name)).customerId;
      render();
    },
  });
}

// A ticket's code as a QR code (error correction level M, the smallest
// version that holds it) on `canvas`, with a quiet zone of four modules.
function drawQr(canvas, qrcode, text, pixelsPerModule) {
  const qr = qrcode(0, 'M');
  qr.addData(text, 'Byte');
  qr.make();
  const quiet = 4;
  const count = qr.getModuleCount();
  const size = (count + 2 * quiet) * pixelsPerModule;
  canvas.width = size;
  canvas.height = size;
  const ctx = canvas.getContext('2d');
  ctx.fillStyle = '#ffffff';
  ctx.fillRect(0, 0, size, size);
  ctx.fillStyle = '#000000';
  for (let y = 0; y < count; y++) {
    for (let x = 0; x < count; x++) {
      if (qr.isDark(y, x)) ctx.fillRect((x + quiet) * pixelsPerModule, (y + quiet) * pixelsPerModule, pixelsPerModule, pixelsPerModule);
    }
  }
}

// A booking cancelled from the page: its tickets leave the list at once.
function bookingCancelled(bookingId) {
  state.cancelled.add(bookingId);
  state.tickets = shownTickets(state.tickets);
  renderTickets();
}

// A ticket's rotation (the secret its rotating code is made with), fetched
// once; null when it cannot be had, and the static code is shown instead
// (the one printed and e-mailed, accepted at events with static codes).
async function rotationOf(tk) {
  if (state.rotations.has(tk.ticketId)) return state.rotations.get(tk.ticketId);
  let rotation = null;
  try {
    const reply = await api.rotation(tk.ticketId);
    rotation = { code: reply.code, secret: fromBase64(reply.secret), stepSeconds: Number(reply.stepSeconds) || 30 };
  } catch {
    rotation = null;
  }
  state.rotations.set(tk.ticketId, rotation);
  return rotation;
}

// Draws each rotating code of the step now, then again at the next step's
// start, while the tickets are shown: a screenshot stops working within a
// minute.
async function drawRotating(qrcode) {
  clearTimeout(state.rotationTimer);
  if (state.view !== 'tickets') return;
  let stepSeconds = 30;
  for (const canvas of document.querySelectorAll('#tickets canvas[data-ticket]')) {
    const rotation = state.rotations.get(canvas.dataset.ticket);
    if (!rotation) continue;
    stepSeconds = rotation.stepSeconds;
    const text = await rotatingCode(rotation.code, rotation.secret, canvas.dataset.ticket, rotationStep(Date.now(), stepSeconds));
    canvas.dataset.code = text;
    drawQr(canvas, qrcode, text, 5);
  }
  const next = (rotationStep(Date.now(), stepSeconds) + 1) * stepSeconds * 1000 - Date.now();
  state.rotationTimer = setTimeout(() => drawRotating(qrcode), Math.max(next, 200) + 50);
}

function renderTickets() {
  if (state.ticketsDown) $('tickets-note').textContent = t('error.TICKETS_UNAVAILABLE');
  else $('tickets-note').textContent = state.tickets.length ? t('ticketsNote') : t('noTickets');
  cancellations.render(state.ticketsDown ? [] : state.tickets, state.event);
  const list = $('tickets');
  const shown = state.tickets;
  const parts = [import('./qrcode-generator.js'), import('./transfer.js'), Promise.all(shown.map(rotationOf))];
  Promise.all(parts).then(([{ qrcode }, { transferControls }, rotations]) => {
    if (shown !== state.tickets) return;
    list.replaceChildren(
      ...shown.map((tk, i) => {
        const li = document.createElement('li');
        li.className = 'ticket';
        const h = document.createElement('h2');
        const section = state.event?.sections.find((s) => s.sectionId === tk.sectionId);
        h.textContent = tk.seatLabel
          ? t('ticketSeat', { section: section ? section.displayName : tk.sectionId, seat: tk.seatLabel })
          : t('ticketStanding', { section: section ? section.displayName : tk.sectionId });
        const canvas = document.createElement('canvas');
        canvas.setAttribute('role', 'img');
        const code = document.createElement('code');
        code.textContent = tk.code;
        const note = document.createElement('p');
        note.className = 'muted small';
        if (rotations[i]) {
          canvas.dataset.ticket = tk.ticketId;
          canvas.setAttribute('aria-label', t('qrRotating'));
          note.textContent = t('rotatingNote');
        } else {
          canvas.setAttribute('aria-label', t('qrOf', { code: tk.code }));
          canvas.dataset.code = tk.code;
          drawQr(canvas, qrcode, tk.code, 6);
          note.textContent = t('staticNote');
        }
        li.append(h, canvas, note, code, transferControls(tk, { t, errorText, changed: reloadTickets }));
        return li;
      }),
    );
    return drawRotating(qrcode);
  });
}

// -- start ---------------------------------------------------------------------------

async function resume(read) {
  let position;
  try {
    position = (await (read || api.position(state.eventId))).position;
  } catch (err) {
    if (SIGNED_OUT.has(err.reason)) state.me = null;
    return openEvent(SIGNED_OUT.has(err.reason) ? '' : errorText(err));
  }
  if (position.state === 'QUEUE_STATE_WAITING') return enterWaiting(position);
  if (position.state === 'QUEUE_STATE_ADMITTED') return admitted();
  return openEvent();
}

async function start() {
  // The catalog and the fan's state are read at once, not one after another.
  const match = /^\/e\/([0-9]{1,19})\/?$/.exec(window.location.pathname);
  state.eventId = match ? match[1] : null;
  takeStaffPass();
  cancellations = new Cancellations({ i18n: () => state.i18n, $, errorText, cancelled: bookingCancelled });
  const language = startLanguage(config, $('lang'), (i18n) => {
    state.i18n = i18n;
    render();
    if (state.view === 'tickets') renderTickets();
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
  $('sign-in').addEventListener('submit', signIn);
  $('join').addEventListener('click', join);
  $('fan-draw-register').addEventListener('click', registerForFanDraw);
  $('show-tickets').addEventListener('click', () => openTickets(null));
  $('leave').addEventListener('click', leave);
  $('shop-leave').addEventListener('click', leave);
  $('hold-picked').addEventListener('click', () => hold({ seats: { seatIds: state.map.selected().map((s) => String(s.id)) } }));
  $('clear-picked').addEventListener('click', () => state.map.clear());
  $('hold-best').addEventListener('click', () => hold({ bestAvailable: { sectionId: state.section, quantity: Number($('best-qty').value) } }));
  $('hold-ga').addEventListener('click', () => hold({ bestAvailable: { sectionId: state.section, quantity: Number($('ga-qty').value) } }));
  $('release').addEventListener('click', release);
  $('pay-form').addEventListener('submit', pay);
  $('sign-out').addEventListener('click', async () => {
    await api.signOut().catch(() => null);
    state.me = null;
    window.location.reload();
  });

  if (window.location.pathname === '/claim') {
    await language;
    await openClaim();
    return;
  }
  if (!match) {
    await language;
    show('home');
    await catalogue.start();
    return;
  }
  await language;
  let event;
  try {
    event = await eventRead;
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
  state.event = event;
  state.me = await sessionRead;
  if (!state.me) {
    openEvent();
    return;
  }
  await resume(positionRead);
}

start();
