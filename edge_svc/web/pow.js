// A Web Worker that answers the edge's proof-of-work challenge: the nonce
// for which SHA-256("<challenge>:<nonce>") starts with as many zero bits as
// the challenge asks (difficultyBits, else its payload's "d"). Posts back the proof,
// "<challenge>:<nonce>", for the Boxoffice-Proof header.

function bitsOf(challenge) {
  const payload = challenge.split('.')[2] || '';
  const json = atob(payload.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (payload.length % 4)) % 4));
  return Number(JSON.parse(json).d) || 0;
}

function leadingZeroBits(bytes) {
  let bits = 0;
  for (const byte of bytes) {
    if (byte === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}

self.onmessage = async (event) => {
  const challenge = String(event.data.challenge);
  const bits = Number(event.data.bits) || bitsOf(challenge);
  const encoder = new TextEncoder();
  for (let nonce = 0; ; nonce++) {
    const proof = `${challenge}:${nonce}`;
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(proof)));
    if (leadingZeroBits(digest) >= bits) {
      self.postMessage({ proof, tries: nonce + 1 });
      return;
    }
  }
};
