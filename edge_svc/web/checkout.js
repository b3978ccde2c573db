// The hold and payment: the held seats and their countdown, a test card,
// paying (asking again, with the same key, while the bank takes its time)
// and releasing the seats. Made by app.js with the page (page.js).

import { api } from './api.js';
import { BACK_TO_QUEUE, wait } from './page.js';

const CARDS = ['pm_card_ok', 'pm_card_declined', 'pm_card_fail', 'pm_card_timeout'];
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

export function checkoutView(page) {
  const { state, $, t, session, message, errorText } = page;

  function openHold(held) {
    state.hold = held;
    page.show('hold');
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
      page.openShop(t('error.HOLD_EXPIRED'));
    }
  }

  async function release() {
    const h = state.hold;
    try {
      await api.release(h.holdId);
    } catch (err) {
      if (BACK_TO_QUEUE.has(err.reason)) return page.backToQueue(err.reason);
    }
    session('hold', null);
    return page.openShop(t('released'));
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
      return page.openTickets(state.hold);
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
    if (BACK_TO_QUEUE.has(err.reason)) return page.backToQueue(err.reason);
    if (['HOLD_EXPIRED', 'HOLD_NOT_HELD', 'NOT_FOUND'].includes(err.reason)) {
      session('hold', null);
      return page.openShop(t('error.HOLD_EXPIRED'));
    }
    return message('pay-message', errorText(err));
  }

  // Its controls' handlers.
  function listen() {
    $('release').addEventListener('click', release);
    $('pay-form').addEventListener('submit', pay);
  }

  return { render: renderHold, open: openHold, listen };
}
