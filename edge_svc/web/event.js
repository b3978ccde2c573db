// The event page: the event's sections, prices and seats left, sign-in,
// the verified-fan draw, a presale code or a staff pass, and joining the
// queue (with a proof of work when the edge asks for one). Made by app.js
// with the page (page.js); it reaches the other views through the page.

import { api } from './api.js';
import { SIGNED_OUT } from './page.js';

export function eventView(page) {
  const { config, state, $, t, errorText } = page;

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
    page.waitlist.offer(!!state.me && soldOut(), $('join-status'));
    renderFanDraw();
  }

  async function openEvent(notice) {
    page.show('event');
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
        state.tickets = page.shownTickets((await api.tickets(state.eventId)).tickets || []);
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
      await page.resume();
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
      if (position.state === 'QUEUE_STATE_ADMITTED') await page.admitted();
      else page.enterWaiting(position);
    } catch (err) {
      if (SIGNED_OUT.has(err.reason)) {
        state.me = null;
      }
      openEvent(errorText(err));
    } finally {
      $('join').disabled = false;
    }
  }

  // Its controls' handlers.
  function listen() {
    $('sign-in').addEventListener('submit', signIn);
    $('join').addEventListener('click', join);
    $('fan-draw-register').addEventListener('click', registerForFanDraw);
  }

  return { render: renderEvent, open: openEvent, joinQueue, soldOut, takeStaffPass, listen };
}
