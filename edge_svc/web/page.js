// What the fan page's views share: the page's state, its elements, its
// words and messages, the storage of this event's tab, and the reasons
// that send a fan elsewhere. app.js makes the page and its views
// (event.js, room.js, shop.js, checkout.js, tickets.js); each view reaches
// the others through the page (`page.openShop(...)`), never by importing
// one another.

import { ApiError } from './api.js';

export const BACK_TO_QUEUE = new Set(['TOKEN_EXPIRED', 'SESSION_ENDED', 'TOKEN_MISSING', 'TOKEN_INVALID', 'TOKEN_UNKNOWN_KEY']);
export const SIGNED_OUT = new Set(['NOT_SIGNED_IN', 'SESSION_INVALID']);

export const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The page's state and the helpers every view uses. app.js adds show(view)
// and render(), and the views' ways in: openEvent, enterWaiting, admitted,
// backToQueue, joinQueue, soldOut, openShop, openHold, openTickets,
// shownTickets and resume; and the event's waiting list (waitlist.js).
export function newPage(config) {
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

  const $ = (id) => document.getElementById(id);
  const t = (key, params) => state.i18n.t(key, params);

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

  return { config, state, $, t, session, message, errorText };
}
