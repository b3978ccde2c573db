// The waiting room's view: the fan's place, the wait and the room's state,
// live (waiting.js keeps them coming), leaving the queue, and where an
// admitted fan goes next (their open hold, their tickets, or the seats).
// Made by app.js with the page (page.js).

import { api, seconds } from './api.js';
import { roundAhead } from './i18n.js';
import { SIGNED_OUT } from './page.js';
import { Waiting } from './waiting.js';

const ROOM = {
  ADMISSION_STATE_PRE_QUEUE: ['room.preQueue', ''],
  ADMISSION_STATE_OPEN: ['room.open', 'open'],
  ADMISSION_STATE_PAUSED: ['room.paused', 'paused'],
  ADMISSION_STATE_SOLD_OUT: ['room.soldOut', 'soldout'],
};

export function roomView(page) {
  const { state, $, t, session, errorText } = page;

  function enterWaiting(position) {
    state.position = position;
    state.shown = null;
    state.link = null;
    page.show('waiting');
    const waiting = new Waiting(state.eventId, {
      onPosition: (p) => {
        state.position = { ...state.position, ...p };
        renderWaiting();
      },
      onAdmitted: () => admitted(),
      onEnded: (why) => {
        state.waiting = null;
        if (SIGNED_OUT.has(why)) state.me = null;
        page.openEvent(t('queueEnded'));
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
    const [key, cls] = page.soldOut() ? ['room.soldOut', 'soldout'] : ROOM[p.admissionState] || ['room.open', 'open'];
    $('sold-out').hidden = !roomSoldOut;
    page.waitlist.offer(roomSoldOut || page.soldOut(), $('sold-out'));
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
    page.openEvent(t('left'));
  }

  async function admitted() {
    session('maxAhead', null);
    const holdId = session('hold');
    if (holdId) {
      try {
        const { hold } = await api.getHold(holdId);
        if (hold.state === 'HOLD_STATE_HELD') return page.openHold(hold);
        if (hold.state === 'HOLD_STATE_CONFIRMED') return page.openTickets(hold);
      } catch {
        // Gone: choose again.
      }
      session('hold', null);
    }
    return page.openShop();
  }

  async function backToQueue(reason) {
    session('hold', null);
    try {
      const { position } = await page.joinQueue();
      if (position.state === 'QUEUE_STATE_ADMITTED') return page.openShop(t(`error.${reason}`));
      enterWaiting(position);
      return undefined;
    } catch (err) {
      return page.openEvent(errorText(err));
    }
  }

  // Its controls' handlers.
  function listen() {
    $('leave').addEventListener('click', leave);
    $('shop-leave').addEventListener('click', leave);
  }

  return { render: renderWaiting, enter: enterWaiting, admitted, backToQueue, listen };
}
