// Reads a systemd unit file's sections the way the tests need them: key -> values (a key may repeat).

export function serviceSection(text: string): Map<string, string[]> {
  return unitSection(text, 'Service');
}

export function unitSection(text: string, name: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let inService = false;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('[')) {
      inService = line === `[${name}]`;
      continue;
    }
    if (!inService || line === '' || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    const key = line.slice(0, eq);
    out.set(key, [...(out.get(key) ?? []), line.slice(eq + 1)]);
  }
  return out;
}
