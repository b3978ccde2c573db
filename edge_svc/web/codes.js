// Ticket codes in the browser, with WebCrypto only: the fan's rotating code
// and the gate's offline checks of a code.
//
// A signed code is a compact JWS (EdDSA over Ed25519) of {sub: ticket id,
// ev: event id, sec: section, seat: seat label, iat}. A rotating code is
// `<signed code>~<step>~<mac>`: the step is the Unix time over 30 s, the mac
// the first 16 bytes of HMAC-SHA256 under the ticket's own secret over
// "<ticket id>.<step>", unpadded base64url (boxoffice.ticketcodes).

const JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
const ROTATING = /^([A-Za-z0-9_.-]+)~([0-9]{1,12})~([A-Za-z0-9_-]{22})$/;
const MAX_CODE_LENGTH = 1024;
export const STEP_SECONDS = 30;

export function fromBase64Url(text) {
  const b64 = text.replace(/-/g, '+').replace(/_/g, '/');
  const binary = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

export function toBase64Url(bytes) {
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

// The bytes of a proto3 JSON `bytes` field (standard base64).
export function fromBase64(text) {
  return fromBase64Url(String(text || '').replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, ''));
}

export function rotationStep(nowMs, stepSeconds = STEP_SECONDS) {
  return Math.floor(nowMs / 1000 / stepSeconds);
}

export async function rotationMac(secret, ticketId, step) {
  const key = await crypto.subtle.importKey('raw', secret, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  const digest = await crypto.subtle.sign('HMAC', key, new TextEncoder().encode(`${ticketId}.${step}`));
  return toBase64Url(new Uint8Array(digest).slice(0, 16));
}

export async function rotatingCode(code, secret, ticketId, step) {
  return `${code}~${step}~${await rotationMac(secret, ticketId, step)}`;
}

// {code, step, mac} of a rotating code; null for any other shape.
export function splitRotating(text) {
  if (text.length > MAX_CODE_LENGTH) return null;
  const found = ROTATING.exec(text);
  return found ? { code: found[1], step: Number(found[2]), mac: found[3] } : null;
}

// Constant-time equality of two strings of one length.
export function sameMac(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

// Verifies signed codes against a JSON Web Key Set (OKP, Ed25519): the
// claims of a valid code, null otherwise. The algorithm is fixed here,
// never taken from the code's header.
export class CodeVerifier {
  constructor(jwks) {
    this.jwks = jwks;
    this.keys = new Map();
  }

  async key(kid) {
    if (this.keys.has(kid)) return this.keys.get(kid);
    const jwk = (this.jwks.keys || []).find((k) => k.kid === kid && k.kty === 'OKP' && k.crv === 'Ed25519');
    let key = null;
    if (jwk) {
      try {
        key = await crypto.subtle.importKey('jwk', { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, { name: 'Ed25519' }, false, ['verify']);
      } catch {
        key = null;
      }
    }
    this.keys.set(kid, key);
    return key;
  }

  async verify(code) {
    if (code.length > MAX_CODE_LENGTH || !JWS.test(code)) return null;
    const [head, body, signature] = code.split('.');
    let header;
    let claims;
    try {
      header = JSON.parse(new TextDecoder().decode(fromBase64Url(head)));
      claims = JSON.parse(new TextDecoder().decode(fromBase64Url(body)));
    } catch {
      return null;
    }
    if (!header || header.alg !== 'EdDSA' || header.typ !== 'ticket' || typeof header.kid !== 'string') return null;
    const key = await this.key(header.kid);
    if (!key) return null;
    let valid = false;
    try {
      valid = await crypto.subtle.verify({ name: 'Ed25519' }, key, fromBase64Url(signature), new TextEncoder().encode(`${head}.${body}`));
    } catch {
      valid = false;
    }
    if (!valid || !claims || typeof claims.sub !== 'string' || !Number.isInteger(claims.ev) || claims.ev <= 0) return null;
    return { ticketId: claims.sub, eventId: claims.ev, sectionId: String(claims.sec || ''), seatLabel: String(claims.seat || '') };
  }
}
