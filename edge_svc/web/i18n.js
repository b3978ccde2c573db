// Messages from one catalog per language (messages/<lang>.json), chosen
// from the browser's languages (Accept-Language) or the fan's choice, and
// numbers, money, dates and durations through Intl in that locale; and the
// pages' language picker.

const STORE_KEY = 'bo.lang';

export function chooseLanguage(available, preferred) {
  let stored = null;
  try {
    stored = localStorage.getItem(STORE_KEY);
  } catch {
    stored = null;
  }
  if (stored && available.includes(stored)) return stored;
  for (const wanted of preferred || []) {
    const lower = wanted.toLowerCase();
    const exact = available.find((a) => a.toLowerCase() === lower);
    if (exact) return exact;
    const base = lower.split('-')[0];
    const same = available.find((a) => a.toLowerCase().split('-')[0] === base);
    if (same) return same;
  }
  return available[0];
}

export function remember(lang) {
  try {
    localStorage.setItem(STORE_KEY, lang);
  } catch {
    // Private mode: the choice lasts for this page only.
  }
}

export class I18n {
  constructor(lang, messages) {
    this.lang = lang;
    this.messages = messages;
    this.plural = new Intl.PluralRules(lang);
    this.num = new Intl.NumberFormat(lang);
  }

  t(key, params = {}) {
    let text = this.messages[key];
    if (text === undefined) {
      const count = params.count;
      if (typeof count === 'number') {
        text = this.messages[`${key}.${this.plural.select(count)}`] ?? this.messages[`${key}.other`];
      }
    }
    if (text === undefined) return key;
    return text.replace(/\{(\w+)\}/g, (_, name) => {
      const value = params[name];
      if (value === undefined) return `{${name}}`;
      return typeof value === 'number' ? this.num.format(value) : String(value);
    });
  }

  number(n) {
    return this.num.format(n);
  }

  money(money) {
    if (!money || !money.currencyCode) return '';
    const format = new Intl.NumberFormat(this.lang, { style: 'currency', currency: money.currencyCode });
    const digits = format.resolvedOptions().maximumFractionDigits;
    return format.format(Number(money.amountMinor || 0) / 10 ** digits);
  }

  // In the event's own zone when given ("20:00" is the venue's 20:00), with
  // the zone's name; else in the browser's.
  dateTime(iso, timeZone) {
    if (!iso) return '';
    const options = { dateStyle: 'full', timeStyle: 'short' };
    if (timeZone) {
      try {
        const zoned = new Intl.DateTimeFormat(this.lang, { ...options, timeZone }).format(new Date(iso));
        const name = new Intl.DateTimeFormat(this.lang, { timeZone, timeZoneName: 'short' })
          .formatToParts(new Date(iso))
          .find((part) => part.type === 'timeZoneName');
        return name ? `${zoned} (${name.value})` : zoned;
      } catch {
        // A zone this browser does not know: its own.
      }
    }
    return new Intl.DateTimeFormat(this.lang, options).format(new Date(iso));
  }

  minutes(n) {
    return new Intl.NumberFormat(this.lang, { style: 'unit', unit: 'minute', unitDisplay: 'long' }).format(n);
  }

  clock(totalSeconds) {
    const s = Math.max(0, Math.floor(totalSeconds));
    const two = new Intl.NumberFormat(this.lang, { minimumIntegerDigits: 2, useGrouping: false });
    return `${two.format(Math.floor(s / 60))}:${two.format(s % 60)}`;
  }

  // Applies the catalog to the static page: data-t (text), data-ta (aria-label).
  apply(root) {
    document.documentElement.lang = this.lang;
    for (const el of root.querySelectorAll('[data-t]')) el.textContent = this.t(el.dataset.t);
    for (const el of root.querySelectorAll('[data-ta]')) el.setAttribute('aria-label', this.t(el.dataset.ta));
  }
}

export async function loadCatalog(url) {
  const reply = await fetch(url, { credentials: 'same-origin' });
  if (!reply.ok) throw new Error(`catalog ${url}: HTTP ${reply.status}`);
  return reply.json();
}

// The language of a page (the fan's page and the gate's): its catalog, and
// the picker `select` listing the page's languages, each named in the
// chosen one.
async function openLanguage(config, select, lang) {
  const i18n = new I18n(lang, await loadCatalog(config.catalogs[lang]));
  select.replaceChildren(
    ...config.languages.map((code) => {
      const option = document.createElement('option');
      option.value = code;
      option.lang = code;
      option.textContent = i18n.t(`languages.${code}`);
      return option;
    }),
  );
  select.value = lang;
  return i18n;
}

// Opens the page in the language chosen last, else the browser's first one
// that the page has (the I18n it resolves to); a language chosen in the
// picker is remembered and `changed` is given its I18n.
export function startLanguage(config, select, changed) {
  select.addEventListener('change', async () => {
    const chosen = select.value;
    remember(chosen);
    changed(await openLanguage(config, select, chosen));
  });
  return openLanguage(config, select, chooseLanguage(config.languages, navigator.languages || [navigator.language]));
}

// "about 12,000": exact up to 20, then to the nearest 5 below 100, then two
// significant figures; the figure a fan reads and the page announces.
export function roundAhead(n) {
  if (n <= 20) return n;
  if (n < 100) return Math.round(n / 5) * 5;
  const magnitude = 10 ** (Math.floor(Math.log10(n)) - 1);
  return Math.round(n / magnitude) * magnitude;
}
