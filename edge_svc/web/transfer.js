// Ticket transfers on the fan's pages: the "transfer to a friend" action of
// each ticket, and the page a claim link opens (/claim#<transfer>.<secret>;
// the secret stays in the fragment, never sent but in the claim's body).

import { api } from './api.js';

function button(text, type = 'button') {
  const b = document.createElement('button');
  b.type = type;
  b.textContent = text;
  return b;
}

// The controls under one ticket: a pending transfer and its cancel, or a
// form that sends the ticket to a friend's address. `changed` reloads the list.
export function transferControls(tk, { t, errorText, changed }) {
  const box = document.createElement('div');
  box.className = 'transfer';
  const status = document.createElement('p');
  status.className = 'small';
  status.setAttribute('role', 'status');
  const pending = tk.pendingTransfer;
  if (pending) {
    const note = document.createElement('p');
    note.className = 'small';
    note.textContent = t('transfer.pending', { email: pending.email });
    const cancel = button(t('transfer.cancel'));
    cancel.className = 'link';
    cancel.addEventListener('click', async () => {
      cancel.disabled = true;
      try {
        await api.cancelTransfer(pending.transferId);
        await changed();
      } catch (err) {
        status.textContent = errorText(err);
        cancel.disabled = false;
      }
    });
    box.append(note, cancel, status);
    return box;
  }
  const details = document.createElement('details');
  const summary = document.createElement('summary');
  summary.textContent = t('transfer.open');
  const form = document.createElement('form');
  form.className = 'transfer-form';
  const id = `transfer-email-${tk.ticketId}`;
  const label = document.createElement('label');
  label.htmlFor = id;
  label.textContent = t('transfer.email');
  const input = document.createElement('input');
  input.id = id;
  input.type = 'email';
  input.required = true;
  input.maxLength = 254;
  input.autocomplete = 'off';
  const send = button(t('transfer.send'), 'submit');
  form.append(label, input, send);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    send.disabled = true;
    try {
      await api.transfer(tk.ticketId, input.value.trim());
      await changed();
    } catch (err) {
      status.textContent = errorText(err);
      send.disabled = false;
    }
  });
  details.append(summary, form);
  box.append(details, status);
  return box;
}

// The claim link's transfer id and secret, or null for a link that is not one.
export function claimLink(hash) {
  const match = /^#([0-9a-f-]{36})\.([A-Za-z0-9_-]{1,100})$/.exec(hash || '');
  return match ? { transferId: match[1], secret: match[2] } : null;
}

// The claim page: sign in (when development sign-in is on), then claim.
// Its draw() says it all again in the language of the moment.
export function startClaim({ $, t, errorText, me, signIn, devSignIn }) {
  const link = claimLink(window.location.hash);
  const status = $('claim-status');
  // What the status line says: a message key, or an error of the API.
  let said = link ? null : { key: 'claim.badLink' };
  let claimed = false;
  const say = (what) => {
    said = what;
    draw();
  };
  const draw = () => {
    const signedIn = !!me();
    $('claim-sign-in').hidden = signedIn || !devSignIn || !link || claimed;
    $('claim-sign-in-needed').hidden = signedIn || devSignIn || !link || claimed;
    $('claim').hidden = !signedIn || !link || claimed;
    status.textContent = !said ? '' : said.key ? t(said.key) : errorText(said.err);
  };
  $('claim-sign-in').addEventListener('submit', async (event) => {
    event.preventDefault();
    const name = $('claim-name').value.trim();
    if (!name) return;
    try {
      await signIn(name);
      draw();
    } catch (err) {
      say({ err });
    }
  });
  $('claim').addEventListener('click', async () => {
    $('claim').disabled = true;
    try {
      const reply = await api.claimTransfer(link.transferId, link.secret);
      // The secret did its work: it leaves the address bar.
      window.history.replaceState(null, '', '/claim');
      claimed = true;
      $('claim-open').href = `/e/${encodeURIComponent(reply.ticket.eventId)}`;
      $('claim-done').hidden = false;
      say({ key: 'claim.done' });
    } catch (err) {
      $('claim').disabled = false;
      say({ err });
    }
  });
  draw();
  return { draw };
}
