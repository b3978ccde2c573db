// The gate page, for staff phones at the door. Provisioned by a link whose
// fragment carries the device's key (`/gate#event=ID&key=bxd_...&gate=north-1`):
// the page keeps the key in this phone's storage and takes it out of the
// address bar at once (a fragment never reaches a server or a log). Codes
// come from the camera (BarcodeDetector where the browser has one, jsQR
// otherwise), a photo or the keyboard; each gets a big green or red verdict
// with the seat. Online the door decides; with no network the page decides
// from the downloaded list (signatures with the event's public keys,
// rotating codes' macs with the list's secrets, a static code only where the
// event's rules from the list accept one) and uploads its admissions
// once the network is back.

import { startLanguage } from './i18n.js';
import { DoorBook, NetworkDown } from './doorbook.js';

const config = JSON.parse(document.querySelector('meta[name="bo-config"]').content);
const $ = (id) => document.getElementById(id);
const DEVICE = 'bo.gate.device';
// A code seen again within this long is the same scan (a camera reads a QR many times a second).
const REPEAT_MS = 4000;
const SYNC_MS = 30000;

const state = { i18n: null, book: null, device: null, online: navigator.onLine, last: null, verdict: null, stream: null, detector: undefined, syncing: false };
const t = (key, params) => state.i18n.t(key, params);

function provision() {
  const fragment = new URLSearchParams(window.location.hash.slice(1));
  const key = fragment.get('key');
  const eventId = fragment.get('event');
  if (key && eventId && /^[0-9]{1,19}$/.test(eventId)) {
    const device = { key, eventId, gateId: fragment.get('gate') || 'gate-1' };
    localStorage.setItem(DEVICE, JSON.stringify(device));
  }
  if (window.location.hash) history.replaceState(null, '', window.location.pathname + window.location.search);
  try {
    return JSON.parse(localStorage.getItem(DEVICE) || 'null');
  } catch {
    return null;
  }
}

function gateId() {
  const typed = $('gate-id').value.trim();
  return /^[A-Za-z0-9._:-]{1,64}$/.test(typed) ? typed : state.device.gateId;
}

function render() {
  state.i18n.apply(document);
  document.title = `${t('gate.title')} · ${t('brand')}`;
  if (!state.device) return;
  $('gate-title').textContent = t('gate.heading', { event: state.device.eventId });
  $('net').textContent = state.online ? t('gate.online') : t('gate.offline');
  $('net').dataset.online = String(state.online);
  const book = state.book;
  $('list-state').textContent = book.verifier ? t('gate.list', { count: book.size }) : t('gate.noList');
  $('queue-state').textContent = book.queue.length ? t('gate.queued', { count: book.queue.length }) : state.uploaded || '';
  if (state.verdict) showVerdict(state.verdict);
}

function showVerdict(verdict) {
  state.verdict = verdict;
  const box = $('verdict');
  box.hidden = false;
  box.dataset.result = verdict.result;
  box.className = `verdict ${verdict.result === 'ADMITTED' || verdict.result === 'LEFT' ? 'go' : 'stop'}`;
  $('verdict-word').textContent = verdict.error || t(`gate.result.${verdict.result}`);
  const ticket = verdict.ticket;
  $('verdict-seat').textContent = ticket ? (ticket.seat ? t('gate.seat', { section: ticket.section, seat: ticket.seat }) : t('gate.standing', { section: ticket.section })) : '';
  const first = verdict.first;
  const when = first && first.at ? new Date(first.at).toLocaleTimeString(state.i18n.lang) : '';
  const detail = [];
  if (verdict.result === 'ALREADY_CHECKED_IN' && first) detail.push(t('gate.firstAt', { time: when, gate: first.gate || '' }));
  if (verdict.offline) detail.push(t('gate.decidedOffline'));
  $('verdict-detail').textContent = detail.join(' ');
}

async function judge(code) {
  const text = String(code || '').trim();
  if (!text) return;
  const now = Date.now();
  if (state.last && state.last.text === text && now - state.last.at < REPEAT_MS) return;
  state.last = { text, at: now };
  let verdict;
  if (state.online) {
    try {
      verdict = await state.book.scanOnline(text, gateId());
    } catch (err) {
      if (!(err instanceof NetworkDown)) {
        verdict = { result: 'INVALID', error: err.message, ticket: null, first: null };
      } else {
        setOnline(false);
      }
    }
  }
  if (!verdict) verdict = { ...(await state.book.scanOffline(text, gateId())), offline: true };
  showVerdict(verdict);
  render();
}

function setOnline(online) {
  state.online = online;
  render();
  if (online) sync();
}

async function sync() {
  if (state.syncing) return;
  state.syncing = true;
  try {
    const done = await state.book.upload();
    if (done.uploaded) state.uploaded = t('gate.uploaded', { count: done.uploaded, conflicts: done.conflicts });
    await state.book.refresh();
    state.online = true;
  } catch (err) {
    if (err instanceof NetworkDown) state.online = false;
    else state.uploaded = err.message;
  } finally {
    state.syncing = false;
    render();
  }
}

// -- reading codes -------------------------------------------------------------------

async function detector() {
  if (state.detector !== undefined) return state.detector;
  state.detector = null;
  if ('BarcodeDetector' in window) {
    try {
      const formats = await window.BarcodeDetector.getSupportedFormats();
      if (formats.includes('qr_code')) state.detector = new window.BarcodeDetector({ formats: ['qr_code'] });
    } catch {
      state.detector = null;
    }
  }
  return state.detector;
}

// The text of the first QR code in `canvas`, or null.
async function decode(canvas) {
  const found = await detector();
  if (found) {
    const codes = await found.detect(canvas);
    return codes.length ? codes[0].rawValue : null;
  }
  await import('./jsqr.js');
  const image = canvas.getContext('2d', { willReadFrequently: true }).getImageData(0, 0, canvas.width, canvas.height);
  const read = window.jsQR(image.data, image.width, image.height, { inversionAttempts: 'dontInvert' });
  return read ? read.data : null;
}

async function fromPicture() {
  const file = $('picture').files[0];
  if (!file) return;
  const bitmap = await createImageBitmap(file);
  const canvas = document.createElement('canvas');
  canvas.width = bitmap.width;
  canvas.height = bitmap.height;
  canvas.getContext('2d', { willReadFrequently: true }).drawImage(bitmap, 0, 0);
  const text = await decode(canvas);
  $('picture').value = '';
  state.last = null;
  if (text) await judge(text);
  else showVerdict({ result: 'INVALID', error: t('gate.noCode'), ticket: null, first: null });
}

async function startCamera() {
  const video = $('video');
  try {
    state.stream = await navigator.mediaDevices.getUserMedia({ video: { facingMode: 'environment' }, audio: false });
  } catch {
    $('camera-note').textContent = t('gate.noCamera');
    return;
  }
  video.srcObject = state.stream;
  video.hidden = false;
  $('camera').hidden = true;
  $('camera-stop').hidden = false;
  await video.play();
  const canvas = document.createElement('canvas');
  const look = async () => {
    if (!state.stream) return;
    if (video.videoWidth) {
      canvas.width = video.videoWidth;
      canvas.height = video.videoHeight;
      canvas.getContext('2d', { willReadFrequently: true }).drawImage(video, 0, 0);
      const text = await decode(canvas);
      if (text) await judge(text);
    }
    setTimeout(look, 150);
  };
  look();
}

function stopCamera() {
  if (state.stream) for (const track of state.stream.getTracks()) track.stop();
  state.stream = null;
  $('video').hidden = true;
  $('camera').hidden = false;
  $('camera-stop').hidden = true;
}

// -- start ---------------------------------------------------------------------------

async function start() {
  state.device = provision();
  // A gate link opened on a page already open: provision, then start again.
  window.addEventListener('hashchange', () => {
    if (!window.location.hash) return;
    provision();
    window.location.reload();
  });
  state.i18n = await startLanguage(config, $('lang'), (i18n) => {
    state.i18n = i18n;
    render();
  });
  $('loading').hidden = true;
  if (!state.device) {
    $('view-setup').hidden = false;
    document.body.dataset.view = 'setup';
    render();
    return;
  }
  state.book = new DoorBook(state.device);
  $('view-gate').hidden = false;
  document.body.dataset.view = 'gate';
  $('gate-id').value = state.device.gateId;
  $('gate-id').addEventListener('change', () => {
    state.device.gateId = gateId();
    localStorage.setItem(DEVICE, JSON.stringify(state.device));
  });
  $('typed-form').addEventListener('submit', (e) => {
    e.preventDefault();
    state.last = null;
    judge($('typed').value);
    $('typed').value = '';
  });
  $('picture').addEventListener('change', fromPicture);
  $('camera').addEventListener('click', startCamera);
  $('camera-stop').addEventListener('click', stopCamera);
  $('sync').addEventListener('click', sync);
  window.addEventListener('online', () => setOnline(true));
  window.addEventListener('offline', () => setOnline(false));
  setInterval(() => (state.online || navigator.onLine) && sync(), SYNC_MS);
  render();
  if (state.online) await sync();
  document.body.dataset.ready = 'true';
}

start();
