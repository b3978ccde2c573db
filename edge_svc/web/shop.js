// Choosing seats: the sections, the seat map (seatmap.js, loaded when first
// needed) or a quantity of standing places, and holding them. Made by
// app.js with the page (page.js).

import { api } from './api.js';
import { BACK_TO_QUEUE } from './page.js';

export function shopView(page) {
  const { state, $, t, session, message, errorText } = page;

  async function loadSeatMap() {
    state.seatMap = await api.seatMap(state.eventId);
  }

  async function openShop(notice) {
    page.show('shop');
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
      page.openHold(held);
    } catch (err) {
      if (BACK_TO_QUEUE.has(err.reason)) return page.backToQueue(err.reason);
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

  // Its controls' handlers.
  function listen() {
    $('hold-picked').addEventListener('click', () => hold({ seats: { seatIds: state.map.selected().map((s) => String(s.id)) } }));
    $('clear-picked').addEventListener('click', () => state.map.clear());
    $('hold-best').addEventListener('click', () => hold({ bestAvailable: { sectionId: state.section, quantity: Number($('best-qty').value) } }));
    $('hold-ga').addEventListener('click', () => hold({ bestAvailable: { sectionId: state.section, quantity: Number($('ga-qty').value) } }));
  }

  return { render: renderShop, open: openShop, listen };
}
