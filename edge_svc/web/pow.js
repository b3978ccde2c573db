// A Web Worker that answers the edge's proof-of-work challenge: the nonce
// for which SHA-256("<challenge>:<nonce>") starts with as many zero bits as
// the challenge asks (difficultyBits, else its payload's "d"). Posts back
// the proof, "<challenge>:<nonce>", for the Boxoffice-Proof header.
//
// SHA-256 is computed here, synchronously, from the state after the
// challenge's whole blocks (only the last block or two change with the
// nonce): a million tries take about a second, where an awaited
// crypto.subtle.digest per try is tens of times slower. The proof found is
// checked once with crypto.subtle before it is sent.

function bitsOf(challenge) {
  const payload = challenge.split('.')[2] || '';
  const json = atob(payload.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (payload.length % 4)) % 4));
  return Number(JSON.parse(json).d) || 0;
}

function primes(n) {
  const found = [];
  for (let c = 2; found.length < n; c++) if (found.every((p) => c % p !== 0)) found.push(c);
  return found;
}

const frac32 = (x) => Math.floor((x - Math.floor(x)) * 2 ** 32) | 0;
const K = Int32Array.from(primes(64), (p) => frac32(Math.cbrt(p)));
const H0 = Int32Array.from(primes(8), (p) => frac32(Math.sqrt(p)));
const W = new Int32Array(64);

function compress(state, bytes, off) {
  for (let i = 0; i < 16; i++) {
    const j = off + 4 * i;
    W[i] = (bytes[j] << 24) | (bytes[j + 1] << 16) | (bytes[j + 2] << 8) | bytes[j + 3];
  }
  for (let i = 16; i < 64; i++) {
    const a = W[i - 15];
    const b = W[i - 2];
    const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
    const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
    W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
  }
  let [a, b, c, d, e, f, g, h] = state;
  for (let i = 0; i < 64; i++) {
    const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + s1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
    const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (s0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  state[0] = (state[0] + a) | 0;
  state[1] = (state[1] + b) | 0;
  state[2] = (state[2] + c) | 0;
  state[3] = (state[3] + d) | 0;
  state[4] = (state[4] + e) | 0;
  state[5] = (state[5] + f) | 0;
  state[6] = (state[6] + g) | 0;
  state[7] = (state[7] + h) | 0;
}

function zeroBits(words) {
  let bits = 0;
  for (const word of words) {
    const z = Math.clz32(word);
    bits += z;
    if (z < 32) break;
  }
  return bits;
}

function leadingZeroBytes(bytes) {
  let bits = 0;
  for (const byte of bytes) {
    if (byte !== 0) return bits + Math.clz32(byte) - 24;
    bits += 8;
  }
  return bits;
}

function search(challenge, bits) {
  const prefix = new TextEncoder().encode(`${challenge}:`);
  const whole = prefix.length - (prefix.length % 64);
  const mid = Int32Array.from(H0);
  for (let off = 0; off < whole; off += 64) compress(mid, prefix, off);
  const rest = prefix.subarray(whole);
  const tail = new Uint8Array(192);
  tail.set(rest);
  const state = new Int32Array(8);
  for (let nonce = 0; ; nonce++) {
    const digits = String(nonce);
    let n = rest.length;
    for (let i = 0; i < digits.length; i++) tail[n++] = digits.charCodeAt(i);
    const length = (whole + n) * 8;
    tail[n++] = 0x80;
    const blocks = n + 8 <= 64 ? 1 : 2;
    tail.fill(0, n, blocks * 64);
    const end = blocks * 64;
    tail[end - 4] = (length >>> 24) & 0xff;
    tail[end - 3] = (length >>> 16) & 0xff;
    tail[end - 2] = (length >>> 8) & 0xff;
    tail[end - 1] = length & 0xff;
    state.set(mid);
    compress(state, tail, 0);
    if (blocks === 2) compress(state, tail, 64);
    if (zeroBits(state) >= bits) return { proof: `${challenge}:${digits}`, tries: nonce + 1, engine: 'own' };
  }
}

async function subtleSearch(challenge, bits) {
  const encoder = new TextEncoder();
  for (let nonce = 0; ; nonce++) {
    const proof = `${challenge}:${nonce}`;
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(proof)));
    if (leadingZeroBytes(digest) >= bits) return { proof, tries: nonce + 1, engine: 'subtle' };
  }
}

self.onmessage = async (event) => {
  const challenge = String(event.data.challenge);
  const bits = Number(event.data.bits) || bitsOf(challenge);
  let found = search(challenge, bits);
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(found.proof)));
  if (leadingZeroBytes(digest) < bits) found = await subtleSearch(challenge, bits);
  self.postMessage(found);
};
