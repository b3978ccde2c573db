// The fan's tickets: each ticket's QR code (a rotating one, drawn again at
// every step, where the ticket's rotation can be had; else the static
// code), its transfer to a friend (transfer.js), the cancellation of a
// booking (cancel.js), and the page a transfer's claim link opens. Made by
// app.js with the page (page.js).

import { api, ApiError } from './api.js';
import { Cancellations } from './cancel.js';
import { fromBase64, rotatingCode, rotationStep } from './codes.js';
import { wait } from './page.js';

export function ticketsView(page) {
  const { config, state, $, t, session, errorText } = page;
  let cancellations = null; // made once the page's elements are there (start)

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
    page.show('tickets');
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
        page.render();
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
    page.show('claim');
    state.claim = startClaim({
      $,
      t,
      errorText,
      me: () => state.me,
      devSignIn: config.devSignIn,
      signIn: async (name) => {
        state.me = (await api.signIn(name)).customerId;
        page.render();
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

  // Its parts that need the page's elements, and its controls' handlers.
  function start() {
    cancellations = new Cancellations({ i18n: () => state.i18n, $, errorText, cancelled: bookingCancelled });
    $('show-tickets').addEventListener('click', () => openTickets(null));
  }

  return { render: renderTickets, open: openTickets, shown: shownTickets, openClaim, start };
}
