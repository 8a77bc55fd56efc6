/**
 * How figures read, the same everywhere (status bar, runs panel, chart) and
 * the same as the kernel writes them (rlm_kernel/_words.py): one token format
 * and one way to say a price is unknown.
 */
import type { IStatus } from './protocol';

/** `950 tok`, `12.3k tok`, `1.09M tok`. */
export function formatTokens(tokens: number): string {
  if (tokens < 1000) {
    return `${tokens} tok`;
  }
  if (tokens < 999_950) {
    return `${(tokens / 1000).toFixed(1)}k tok`;
  }
  return `${(tokens / 1_000_000).toFixed(2)}M tok`;
}

/** ` (31.0k cached)`: of the tokens, those read from the provider's prompt cache; `` when none. */
export function formatCached(cached: number): string {
  return cached > 0 ? ` (${formatTokens(cached).replace(/ tok$/, '')} cached)` : '';
}

/** `history compacted`, `history compacted 2×`; `` when never. */
export function formatCompactions(count: number): string {
  return count > 0 ? `history compacted${count > 1 ? ` ${count}×` : ''}` : '';
}

/** `$1.25`, `$0.021`, `$0.00042`: two significant digits at least. */
export function formatMoney(usd: number): string {
  if (!(usd > 0)) {
    return '$0';
  }
  if (usd >= 0.1) {
    return `$${usd.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
  }
  if (usd >= 0.01) {
    return `$${usd.toFixed(3)}`;
  }
  return `$${usd.toFixed(1 - Math.floor(Math.log10(usd)))}`;
}

/**
 * What something cost: `$0.021`; `price unknown` when no call had a known
 * price; `$0.021 + unknown` when some had one (`knownUsd`) and some not.
 */
export function formatCost(costUsd: number | null, knownUsd = 0): string {
  if (costUsd !== null && Number.isFinite(costUsd)) {
    return formatMoney(costUsd);
  }
  return knownUsd > 0 ? `${formatMoney(knownUsd)} + unknown` : 'price unknown';
}

/** `1:07` */
export function formatClock(seconds: number): string {
  const total = Math.max(0, Math.floor(seconds));
  const minutes = Math.floor(total / 60);
  const rest = String(total % 60).padStart(2, '0');
  return `${minutes}:${rest}`;
}

export function plural(count: number, word: string): string {
  return `${count.toLocaleString('en-US')} ${word}${count === 1 ? '' : 's'}`;
}

/** `66 sub-calls: 12 done, 50 running, 4 queued` while some are not done, else `66 sub-calls`. */
export function formatSubcalls(total: number, running = 0, queued = 0): string {
  if (!running && !queued) {
    return plural(total, 'sub-call');
  }
  const parts = [`${Math.max(0, total - running - queued).toLocaleString('en-US')} done`];
  if (running) {
    parts.push(`${running.toLocaleString('en-US')} running`);
  }
  if (queued) {
    parts.push(`${queued.toLocaleString('en-US')} queued`);
  }
  return `${plural(total, 'sub-call')}: ${parts.join(', ')}`;
}

/**
 * What the root model is doing while its call runs: "root model thinking ·
 * 12 s" until the first token (the seconds tick), then "root model writing ·
 * 240 tok"; "waiting for approval" while a step's code waits for a person's
 * answer (`--approve`).
 */
export function formatRoot(status: IStatus, sinceReceiptS: number): string | null {
  if (status.state !== 'running') {
    return null;
  }
  if (status.waiting === 'approval') {
    return 'waiting for approval';
  }
  const root = status.root;
  if (!root) {
    return null;
  }
  if (root.phase === 'thinking') {
    return `root model thinking · ${Math.floor(root.elapsed_s + sinceReceiptS)} s`;
  }
  return `root model writing · ${formatTokens(root.tokens)}`;
}
