// A QR code encoder (ISO/IEC 18004): byte mode, error correction level M,
// versions 1 to 5 (up to 84 bytes; a ticket code "TKT-" + 16 hex digits is
// 20 bytes, version 2). The mask is the one with the lowest penalty.

const LEVEL_M = 0; // format bits of level M
// Per version: error correction codewords per block, data codewords per block.
const VERSIONS = [
  null,
  { ec: 10, blocks: [16] },
  { ec: 16, blocks: [28] },
  { ec: 26, blocks: [44] },
  { ec: 18, blocks: [32, 32] },
  { ec: 24, blocks: [43, 43] },
];
const ALIGNMENT = [null, [], [6, 18], [6, 22], [6, 26], [6, 30]];

const EXP = new Uint8Array(512);
const LOG = new Uint8Array(256);
{
  let x = 1;
  for (let i = 0; i < 255; i++) {
    EXP[i] = x;
    LOG[x] = i;
    x <<= 1;
    if (x & 0x100) x ^= 0x11d;
  }
  for (let i = 255; i < 512; i++) EXP[i] = EXP[i - 255];
}

function mul(a, b) {
  return a === 0 || b === 0 ? 0 : EXP[LOG[a] + LOG[b]];
}

// The generator polynomial of degree n, without its leading 1.
function generator(n) {
  let poly = [1];
  for (let i = 0; i < n; i++) {
    const next = new Array(poly.length + 1).fill(0);
    for (let j = 0; j < poly.length; j++) {
      next[j] ^= poly[j];
      next[j + 1] ^= mul(poly[j], EXP[i]);
    }
    poly = next;
  }
  return poly.slice(1);
}

function remainder(data, gen) {
  const rem = new Array(gen.length).fill(0);
  for (const byte of data) {
    const factor = byte ^ rem.shift();
    rem.push(0);
    for (let i = 0; i < gen.length; i++) rem[i] ^= mul(gen[i], factor);
  }
  return rem;
}

function codewords(bytes, version) {
  const spec = VERSIONS[version];
  const capacity = spec.blocks.reduce((a, b) => a + b, 0);
  const bits = [];
  const put = (value, length) => {
    for (let i = length - 1; i >= 0; i--) bits.push((value >>> i) & 1);
  };
  put(0b0100, 4);
  put(bytes.length, 8);
  for (const b of bytes) put(b, 8);
  put(0, Math.min(4, capacity * 8 - bits.length));
  while (bits.length % 8) bits.push(0);
  const data = [];
  for (let i = 0; i < bits.length; i += 8) data.push(bits.slice(i, i + 8).reduce((a, b) => (a << 1) | b, 0));
  for (let pad = 0xec; data.length < capacity; pad ^= 0xec ^ 0x11) data.push(pad);
  const gen = generator(spec.ec);
  const blocks = [];
  let offset = 0;
  for (const size of spec.blocks) {
    const block = data.slice(offset, offset + size);
    offset += size;
    blocks.push({ data: block, ec: remainder(block, gen) });
  }
  const out = [];
  const longest = Math.max(...spec.blocks);
  for (let i = 0; i < longest; i++) for (const b of blocks) if (i < b.data.length) out.push(b.data[i]);
  for (let i = 0; i < spec.ec; i++) for (const b of blocks) out.push(b.ec[i]);
  return out;
}

const MASKS = [
  (x, y) => (x + y) % 2 === 0,
  (x, y) => y % 2 === 0,
  (x) => x % 3 === 0,
  (x, y) => (x + y) % 3 === 0,
  (x, y) => (Math.floor(x / 3) + Math.floor(y / 2)) % 2 === 0,
  (x, y) => ((x * y) % 2) + ((x * y) % 3) === 0,
  (x, y) => (((x * y) % 2) + ((x * y) % 3)) % 2 === 0,
  (x, y) => (((x + y) % 2) + ((x * y) % 3)) % 2 === 0,
];

class Grid {
  constructor(version) {
    this.size = 17 + 4 * version;
    this.dark = Array.from({ length: this.size }, () => new Array(this.size).fill(false));
    this.fixed = Array.from({ length: this.size }, () => new Array(this.size).fill(false));
  }

  set(x, y, dark) {
    this.dark[y][x] = dark;
    this.fixed[y][x] = true;
  }
}

function functionPatterns(grid, version) {
  const size = grid.size;
  for (let i = 0; i < size; i++) {
    grid.set(6, i, i % 2 === 0);
    grid.set(i, 6, i % 2 === 0);
  }
  for (const [cx, cy] of [[3, 3], [size - 4, 3], [3, size - 4]]) {
    for (let dy = -4; dy <= 4; dy++) {
      for (let dx = -4; dx <= 4; dx++) {
        const x = cx + dx;
        const y = cy + dy;
        if (x < 0 || y < 0 || x >= size || y >= size) continue;
        const d = Math.max(Math.abs(dx), Math.abs(dy));
        grid.set(x, y, d !== 2 && d !== 4);
      }
    }
  }
  const centers = ALIGNMENT[version];
  const last = centers.length - 1;
  for (let i = 0; i < centers.length; i++) {
    for (let j = 0; j < centers.length; j++) {
      if ((i === 0 && j === 0) || (i === 0 && j === last) || (i === last && j === 0)) continue;
      for (let dy = -2; dy <= 2; dy++) {
        for (let dx = -2; dx <= 2; dx++) {
          grid.set(centers[i] + dx, centers[j] + dy, Math.max(Math.abs(dx), Math.abs(dy)) !== 1);
        }
      }
    }
  }
  formatBits(grid, 0);
}

function formatBits(grid, mask) {
  const data = (LEVEL_M << 3) | mask;
  let rem = data;
  for (let i = 0; i < 10; i++) rem = (rem << 1) ^ ((rem >>> 9) * 0x537);
  const bits = ((data << 10) | rem) ^ 0x5412;
  const bit = (i) => ((bits >>> i) & 1) === 1;
  const size = grid.size;
  for (let i = 0; i <= 5; i++) grid.set(8, i, bit(i));
  grid.set(8, 7, bit(6));
  grid.set(8, 8, bit(7));
  grid.set(7, 8, bit(8));
  for (let i = 9; i < 15; i++) grid.set(14 - i, 8, bit(i));
  for (let i = 0; i < 8; i++) grid.set(size - 1 - i, 8, bit(i));
  for (let i = 8; i < 15; i++) grid.set(8, size - 15 + i, bit(i));
  grid.set(8, size - 8, true);
}

function placeData(grid, words) {
  const size = grid.size;
  let i = 0;
  for (let right = size - 1; right >= 1; right -= 2) {
    if (right === 6) right = 5;
    for (let vert = 0; vert < size; vert++) {
      for (let j = 0; j < 2; j++) {
        const x = right - j;
        const upward = ((right + 1) & 2) === 0;
        const y = upward ? size - 1 - vert : vert;
        if (grid.fixed[y][x]) continue;
        if (i < words.length * 8) grid.dark[y][x] = ((words[i >>> 3] >>> (7 - (i & 7))) & 1) === 1;
        i++;
      }
    }
  }
}

function applyMask(grid, mask) {
  const test = MASKS[mask];
  for (let y = 0; y < grid.size; y++) {
    for (let x = 0; x < grid.size; x++) if (!grid.fixed[y][x] && test(x, y)) grid.dark[y][x] = !grid.dark[y][x];
  }
}

const FINDER_A = [1, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0];
const FINDER_B = [0, 0, 0, 0, 1, 0, 1, 1, 1, 0, 1];

function lineScore(line) {
  let score = 0;
  let run = 1;
  for (let i = 1; i <= line.length; i++) {
    if (i < line.length && line[i] === line[i - 1]) {
      run++;
    } else {
      if (run >= 5) score += 3 + (run - 5);
      run = 1;
    }
  }
  for (let i = 0; i + 11 <= line.length; i++) {
    let a = true;
    let b = true;
    for (let k = 0; k < 11; k++) {
      const v = line[i + k] ? 1 : 0;
      if (v !== FINDER_A[k]) a = false;
      if (v !== FINDER_B[k]) b = false;
    }
    if (a) score += 40;
    if (b) score += 40;
  }
  return score;
}

function penalty(grid) {
  const size = grid.size;
  const d = grid.dark;
  let score = 0;
  let dark = 0;
  for (let y = 0; y < size; y++) {
    score += lineScore(d[y]);
    score += lineScore(d.map((row) => row[y]));
    for (let x = 0; x < size; x++) {
      if (d[y][x]) dark++;
      if (x < size - 1 && y < size - 1) {
        const c = d[y][x];
        if (d[y][x + 1] === c && d[y + 1][x] === c && d[y + 1][x + 1] === c) score += 3;
      }
    }
  }
  score += 10 * Math.floor(Math.abs((dark * 100) / (size * size) - 50) / 5);
  return score;
}

// The modules of the QR code of `text` (UTF-8): rows of booleans, true = dark.
export function encode(text, { mask: forced } = {}) {
  const bytes = Array.from(new TextEncoder().encode(text));
  let version = 1;
  while (version < VERSIONS.length && bytes.length + 2 > VERSIONS[version].blocks.reduce((a, b) => a + b, 0)) version++;
  if (version >= VERSIONS.length) throw new RangeError('text too long for a QR code of version 5');
  const words = codewords(bytes, version);
  let best = null;
  for (let mask = 0; mask < 8; mask++) {
    if (forced !== undefined && mask !== forced) continue;
    const grid = new Grid(version);
    functionPatterns(grid, version);
    placeData(grid, words);
    applyMask(grid, mask);
    formatBits(grid, mask);
    const score = penalty(grid);
    if (best === null || score < best.score) best = { score, grid, mask, version };
  }
  return { version: best.version, mask: best.mask, modules: best.grid.dark };
}

// Draws `modules` on `canvas` with a quiet zone of four modules.
export function draw(canvas, modules, pixelsPerModule = 5) {
  const quiet = 4;
  const size = modules.length + 2 * quiet;
  canvas.width = size * pixelsPerModule;
  canvas.height = size * pixelsPerModule;
  const ctx = canvas.getContext('2d');
  ctx.fillStyle = '#ffffff';
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.fillStyle = '#000000';
  modules.forEach((row, y) =>
    row.forEach((dark, x) => {
      if (dark) ctx.fillRect((x + quiet) * pixelsPerModule, (y + quiet) * pixelsPerModule, pixelsPerModule, pixelsPerModule);
    }),
  );
}
