#!/usr/bin/python3
"""Secret Service provider benchmark: fill N items, then interleaved lookup latencies.

    /usr/bin/python3 bench.py --items 100,1000 \\
        --provider gnome='gnome-keyring-daemon --foreground --components=secrets --unlock' \\
        --provider ours='/path/tpm-keychain secret-service ...' \\
        --batches 10 --batch-size 20
    /usr/bin/python3 bench.py --items 10000,100000 --provider ours='...' --only ours

Every provider gets its OWN dbus-daemon (two providers cannot both own org.freedesktop.secrets
on one bus) and its own temporary HOME/XDG_* tree. The bus config has no service directories,
so nothing is D-Bus-activated behind the benchmark's back (a stock `--session` bus would
activate the system's gnome-keyring as org.freedesktop.secrets if the provider is not up).
The provider command runs under `bash -c` in its own process group, with
DBUS_SESSION_BUS_ADDRESS, HOME, XDG_DATA_HOME, XDG_CONFIG_HOME, XDG_CACHE_HOME, XDG_RUNTIME_DIR
set; `{address}`, `{home}` and `{tmp}` in the command are replaced. The --password text is
written to its stdin, which is then closed (gnome-keyring `--unlock` reads it there).

Per N and provider (fresh instances for every N):
  fill   CreateItem x N into the default collection (ReadAlias("default")), attributes
         {"service": "bench", "account": "user<i>"}, label "bench user<i>", a 32-byte secret,
         replace=True (as secret-tool/keyring do; --no-replace to turn off), one long-lived
         dbus-python connection and one plain session. --fill-timeout (default 900 s) stops a
         fill; that provider is then reported as not finished and not measured at that N.
Then, interleaved (round r: A,B for even r, B,A for odd r; each provider-turn is one batch of
--batch-size samples of each of the three measurements, random K):
  lookup   `secret-tool lookup service bench account userK` as a whole process (wall ms)
  get      Item.GetSecret(session) on a reused connection and plain session (ms per call)
  search   Service.SearchItems({service, account}) + Service.GetSecrets (ms per pair)
  ping     org.freedesktop.DBus.Peer.Ping to the provider, on the same connection: the bus's own
           round trip, which no provider can go below (each ping is taken just before a get of
           the batch, so the two are interleaved one by one); get/ping is what a GetSecret adds
Every sample checks the secret it got. Output: a table with fill seconds, medians and p90s
(nearest rank), provider RSS (and its anonymous and private parts) after fill; --json FILE also dumps every sample.
"""

import argparse
import gc
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import dbus

SS = 'org.freedesktop.Secret.'
BUS_NAME = 'org.freedesktop.secrets'
SERVICE_PATH = '/org/freedesktop/secrets'
DEFAULT_ALIAS_PATH = '/org/freedesktop/secrets/aliases/default'
CALL_TIMEOUT = 300.0   # seconds; one slow CreateItem must not abort a large fill

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <keep_umask/>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  <limit name="max_incoming_bytes">1000000000</limit>
  <limit name="max_outgoing_bytes">1000000000</limit>
  <limit name="max_message_size">1000000000</limit>
  <limit name="reply_timeout">600000</limit>
  <limit name="max_replies_per_connection">50000</limit>
</busconfig>
"""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def secret_for(i):
    """Deterministic 32-byte printable secret for item i (so secret-tool output compares simply)."""
    return hashlib.sha256(b'bench-secret-%d' % i).hexdigest()[:32].encode()


def percentile(values, p):
    """Nearest-rank percentile."""
    if not values:
        return float('nan')
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


class Provider:
    def __init__(self, name, command, args):
        self.name = name
        self.command = command
        self.args = args
        self.tmp = None
        self.bus_proc = None
        self.proc = None
        self.bus = None
        self.address = None
        self.session = None
        self.collection = None
        self.paths = {}          # account index -> item path
        self.filled = 0
        self.fill_seconds = None
        self.fill_finished = False
        self.owner_pid = None
        self.rss_kb = None
        self.anon_kb = None
        self.private_kb = None

    # ------------------------------------------------------------ lifecycle
    def start(self):
        self.tmp = tempfile.mkdtemp(prefix=f'ssbench-{self.name}-')
        home = os.path.join(self.tmp, 'home')
        run = os.path.join(self.tmp, 'run')
        for d in (home, os.path.join(home, '.local/share'), os.path.join(home, '.config'),
                  os.path.join(home, '.cache'), run):
            os.makedirs(d, exist_ok=True)
        os.chmod(run, 0o700)
        socket = os.path.join(self.tmp, 'bus')
        conf = os.path.join(self.tmp, 'bus.conf')
        with open(conf, 'w') as f:
            f.write(BUS_CONFIG.format(socket=socket))
        self.bus_proc = subprocess.Popen(['dbus-daemon', f'--config-file={conf}', '--nofork', '--print-address=1'],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                         start_new_session=True)
        self.address = self.bus_proc.stdout.readline().strip()
        if not self.address:
            raise RuntimeError(f'{self.name}: dbus-daemon did not print an address')
        self.env = dict(os.environ)
        self.env.update({
            'DBUS_SESSION_BUS_ADDRESS': self.address,
            'HOME': home,
            'XDG_DATA_HOME': os.path.join(home, '.local/share'),
            'XDG_CONFIG_HOME': os.path.join(home, '.config'),
            'XDG_CACHE_HOME': os.path.join(home, '.cache'),
            'XDG_RUNTIME_DIR': run,
        })
        for k in ('GNOME_KEYRING_CONTROL', 'SSH_AUTH_SOCK', 'DISPLAY', 'WAYLAND_DISPLAY'):
            self.env.pop(k, None)
        cmd = self.command.replace('{address}', self.address).replace('{home}', home).replace('{tmp}', self.tmp)
        self.log_path = os.path.join(self.tmp, 'provider.log')
        logf = open(self.log_path, 'w')
        self.proc = subprocess.Popen(['bash', '-c', cmd], stdin=subprocess.PIPE, stdout=logf,
                                     stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        logf.close()
        try:
            self.proc.stdin.write(self.args.password.encode())
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.bus = dbus.bus.BusConnection(self.address)
        deadline = time.monotonic() + self.args.start_timeout
        while not self.bus.name_has_owner(BUS_NAME):
            if self.proc.poll() is not None:
                raise RuntimeError(f'{self.name}: provider exited with {self.proc.returncode} before owning '
                                   f'{BUS_NAME}; log:\n{self.log_tail()}')
            if time.monotonic() > deadline:
                raise RuntimeError(f'{self.name}: {BUS_NAME} not owned after {self.args.start_timeout} s; '
                                   f'log:\n{self.log_tail()}')
            time.sleep(0.05)
        owner = self.bus.get_name_owner(BUS_NAME)
        self.owner_pid = int(self.bus.call_blocking('org.freedesktop.DBus', '/org/freedesktop/DBus',
                                                    'org.freedesktop.DBus', 'GetConnectionUnixProcessID',
                                                    's', (owner,)))
        try:
            if os.getpgid(self.owner_pid) != self.proc.pid:
                raise RuntimeError(f'{self.name}: {BUS_NAME} is owned by pid {self.owner_pid}, '
                                   'which is not in the provider\'s process group')
        except ProcessLookupError:
            pass
        exe = os.path.realpath(f'/proc/{self.owner_pid}/exe') if os.path.exists(f'/proc/{self.owner_pid}') else '?'
        log(f'[{self.name}] bus {self.address}; {BUS_NAME} owned by pid {self.owner_pid} ({exe})')
        out, self.session = self.call(SERVICE_PATH, SS + 'Service', 'OpenSession', 'sv', ('plain', dbus.String('')))
        self.collection = str(self.call(SERVICE_PATH, SS + 'Service', 'ReadAlias', 's', ('default',)))
        if len(self.collection) <= 1:
            log(f'[{self.name}] no default alias; CreateCollection(alias "default")')
            coll, prompt = self.call(SERVICE_PATH, SS + 'Service', 'CreateCollection', 'a{sv}s',
                                     ({SS + 'Collection.Label': dbus.String('Default')}, 'default'))
            if len(coll) <= 1:
                raise RuntimeError(f'{self.name}: CreateCollection needs a prompt ({prompt}); '
                                   'the benchmark cannot answer prompts')
            self.collection = str(coll)
        locked = self.get_property(self.collection, SS + 'Collection', 'Locked')
        if locked:
            unlocked, prompt = self.call(SERVICE_PATH, SS + 'Service', 'Unlock', 'ao', ([self.collection],))
            if prompt != '/' or self.collection not in unlocked:
                raise RuntimeError(f'{self.name}: default collection is locked and Unlock wants a prompt '
                                   f'({prompt}); start the provider unlocked (gnome-keyring: --unlock + --password)')

    def log_tail(self, n=20):
        try:
            with open(self.log_path, errors='replace') as f:
                return ''.join(f.readlines()[-n:])
        except OSError:
            return ''

    def stop(self):
        if self.bus is not None:
            try:
                self.bus.close()
            except Exception:  # noqa: BLE001
                pass
            self.bus = None
        for p in (self.proc, self.bus_proc):
            if p is None or p.poll() is not None:
                continue
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        self.proc = self.bus_proc = None
        if self.tmp and not self.args.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        elif self.tmp:
            log(f'[{self.name}] kept {self.tmp}')

    # ------------------------------------------------------------ D-Bus helpers
    def call(self, path, iface, method, sig, args, timeout=CALL_TIMEOUT):
        return self.bus.call_blocking(BUS_NAME, path, iface, method, sig, args, timeout=timeout, byte_arrays=True)

    def get_property(self, path, iface, name):
        return self.call(path, 'org.freedesktop.DBus.Properties', 'Get', 'ss', (iface, name))

    def memory(self):
        """Resident memory in KiB: VmRSS, its anonymous part (RssAnon: heap, stacks, what the
        provider holds), and the pages no other process maps (smaps_rollup's Private_Clean +
        Private_Dirty: what stopping the provider would give back)."""
        found = {}
        try:
            with open(f'/proc/{self.owner_pid}/status') as f:
                for line in f:
                    if line.startswith(('VmRSS:', 'RssAnon:')):
                        found[line.split(':')[0]] = int(line.split()[1])
            with open(f'/proc/{self.owner_pid}/smaps_rollup') as f:
                for line in f:
                    if line.startswith(('Private_Clean:', 'Private_Dirty:')):
                        found['private'] = found.get('private', 0) + int(line.split()[1])
        except (OSError, TypeError, ValueError):
            pass
        return found.get('VmRSS'), found.get('RssAnon'), found.get('private')

    # ------------------------------------------------------------ fill
    def fill(self, n):
        replace = not self.args.no_replace
        t0 = time.perf_counter()
        last_report = t0
        label_key = SS + 'Item.Label'
        attrs_key = SS + 'Item.Attributes'
        for i in range(n):
            props = {
                label_key: dbus.String(f'bench user{i}', variant_level=1),
                attrs_key: dbus.Dictionary({'service': 'bench', 'account': f'user{i}'}, signature='ss',
                                           variant_level=1),
            }
            secret = dbus.Struct((dbus.ObjectPath(self.session), dbus.ByteArray(b''),
                                  dbus.ByteArray(secret_for(i)), 'text/plain'), signature='oayays')
            item, prompt = self.call(self.collection, SS + 'Collection', 'CreateItem', 'a{sv}(oayays)b',
                                     (props, secret, replace))
            if len(item) <= 1:
                raise RuntimeError(f'{self.name}: CreateItem returned a prompt ({prompt}); cannot fill')
            self.paths[i] = str(item)
            self.filled = i + 1
            now = time.perf_counter()
            if now - t0 > self.args.fill_timeout:
                self.fill_seconds = now - t0
                log(f'[{self.name}] fill NOT finished: {self.filled}/{n} items after {self.fill_seconds:.1f} s '
                    f'(--fill-timeout {self.args.fill_timeout:g})')
                return False
            if now - last_report > 10:
                last_report = now
                log(f'[{self.name}] fill {self.filled}/{n} ({self.filled / (now - t0):.0f} items/s)')
        self.fill_seconds = time.perf_counter() - t0
        self.fill_finished = True
        self.rss_kb, self.anon_kb, self.private_kb = self.memory()
        log(f'[{self.name}] filled {n} items in {self.fill_seconds:.2f} s ({n / self.fill_seconds:.0f} items/s)')
        return True

    # ------------------------------------------------------------ measurements
    def sample_lookup(self, k):
        cmd = ['secret-tool', 'lookup', 'service', 'bench', 'account', f'user{k}']
        t0 = time.perf_counter_ns()
        r = subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        dt = (time.perf_counter_ns() - t0) / 1e6
        if r.returncode != 0 or r.stdout != secret_for(k):
            raise RuntimeError(f'{self.name}: secret-tool lookup user{k} -> rc {r.returncode}, '
                               f'{r.stdout!r} {r.stderr.decode(errors="replace")!r}')
        return dt

    def sample_get(self, k):
        path = self.paths[k]
        t0 = time.perf_counter_ns()
        secret = self.bus.call_blocking(BUS_NAME, path, SS + 'Item', 'GetSecret', 'o', (self.session,),
                                        timeout=CALL_TIMEOUT, byte_arrays=True)
        dt = (time.perf_counter_ns() - t0) / 1e6
        if bytes(secret[2]) != secret_for(k):
            raise RuntimeError(f'{self.name}: GetSecret user{k} returned {bytes(secret[2])!r}')
        return dt

    def sample_ping(self, k):
        t0 = time.perf_counter_ns()
        self.bus.call_blocking(BUS_NAME, SERVICE_PATH, 'org.freedesktop.DBus.Peer', 'Ping', '', (),
                               timeout=CALL_TIMEOUT)
        return (time.perf_counter_ns() - t0) / 1e6

    def sample_search(self, k):
        attrs = dbus.Dictionary({'service': 'bench', 'account': f'user{k}'}, signature='ss')
        t0 = time.perf_counter_ns()
        unlocked, locked = self.bus.call_blocking(BUS_NAME, SERVICE_PATH, SS + 'Service', 'SearchItems', 'a{ss}',
                                                  (attrs,), timeout=CALL_TIMEOUT, byte_arrays=True)
        secrets = self.bus.call_blocking(BUS_NAME, SERVICE_PATH, SS + 'Service', 'GetSecrets', 'aoo',
                                         (unlocked, self.session), timeout=CALL_TIMEOUT, byte_arrays=True)
        dt = (time.perf_counter_ns() - t0) / 1e6
        if len(unlocked) != 1 or len(secrets) != 1 or bytes(list(secrets.values())[0][2]) != secret_for(k):
            raise RuntimeError(f'{self.name}: SearchItems/GetSecrets user{k}: {len(unlocked)} unlocked, '
                               f'{len(locked)} locked, {len(secrets)} secrets')
        return dt


KINDS = ('lookup', 'get', 'search', 'ping')


def measure(providers, args, rng):
    samples = {p.name: {k: [] for k in KINDS} for p in providers}
    rounds = {p.name: {k: [] for k in KINDS} for p in providers}   # per-batch medians, to show drift
    # warm-up, not recorded
    for p in providers:
        for _ in range(3):
            k = rng.randrange(p.filled)
            p.sample_lookup(k), p.sample_get(k), p.sample_search(k), p.sample_ping(k)
    for r in range(args.batches):
        order = providers if r % 2 == 0 else list(reversed(providers))
        for p in order:
            keys = [rng.randrange(p.filled) for _ in range(args.batch_size)]
            gc.collect()
            gc.disable()
            try:
                pairs = [(p.sample_ping(k), p.sample_get(k)) for k in keys]
                batch = {
                    'lookup': [p.sample_lookup(k) for k in keys],
                    'get': [get for _, get in pairs],
                    'search': [p.sample_search(k) for k in keys],
                    'ping': [ping for ping, _ in pairs],
                }
            finally:
                gc.enable()
            for kind in KINDS:
                samples[p.name][kind].extend(batch[kind])
                rounds[p.name][kind].append(statistics.median(batch[kind]))
        log(f'round {r + 1}/{args.batches}: ' + '; '.join(
            f'{p.name} ' + ' '.join(f'{k}={rounds[p.name][k][-1]:.2f}' for k in KINDS) for p in providers))
    return samples, rounds


def print_table(rows):
    head = ['provider', 'N', 'fill s', 'items/s', 'RSS MB', 'anon MB', 'private MB',
            'lookup med', 'lookup p90', 'get med', 'get p90', 'search med', 'search p90', 'ping med', 'ping p90',
            'get/ping']
    table = [head]
    for row in rows:
        table.append([str(c) for c in row])
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    print()
    print('times in ms; lookup = whole `secret-tool lookup` process, get = Item.GetSecret on a reused plain '
          'session, search = SearchItems + GetSecrets, ping = Peer.Ping to the provider (interleaved with get)')
    for i, r in enumerate(table):
        print('  '.join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print('  '.join('-' * w for w in widths))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--items', default='100,1000', help='comma-separated item counts (default 100,1000)')
    ap.add_argument('--provider', action='append', required=True, metavar="NAME='COMMAND'",
                    help='a provider; repeat for each (placeholders {address} {home} {tmp})')
    ap.add_argument('--only', metavar='NAME', help='measure only this provider')
    ap.add_argument('--batches', type=int, default=10, help='rounds of alternating batches (default 10)')
    ap.add_argument('--batch-size', type=int, default=20, help='samples per measurement per batch (default 20)')
    ap.add_argument('--fill-timeout', type=float, default=900, help='seconds before a fill is abandoned (900)')
    ap.add_argument('--start-timeout', type=float, default=60, help='seconds to wait for the bus name (60)')
    ap.add_argument('--password', default='bench', help='written to each provider\'s stdin (default "bench")')
    ap.add_argument('--no-replace', action='store_true', help='fill with CreateItem(replace=False)')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--json', metavar='FILE', help='write all samples and results as JSON')
    ap.add_argument('--keep', action='store_true', help='keep the temporary HOME/bus directories')
    args = ap.parse_args()

    specs = []
    for spec in args.provider:
        name, sep, cmd = spec.partition('=')
        if not sep or not name or not cmd.strip():
            ap.error(f'--provider wants NAME=COMMAND, got {spec!r}')
        if any(name == n for n, _ in specs):
            ap.error(f'duplicate provider name {name!r}')
        specs.append((name, cmd))
    if args.only:
        specs = [s for s in specs if s[0] == args.only]
        if not specs:
            ap.error(f'--only {args.only}: no such --provider')
    if shutil.which('secret-tool') is None or shutil.which('dbus-daemon') is None:
        sys.exit('secret-tool and dbus-daemon are required')
    sizes = [int(x) for x in args.items.split(',') if x.strip()]
    rng = random.Random(args.seed)

    live = []

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    rows, results = [], []
    status = 0
    try:
        for n in sizes:
            providers = []
            for name, cmd in specs:
                p = Provider(name, cmd, args)
                live.append(p)
                log(f'[{name}] starting: {cmd}')
                p.start()
                providers.append(p)
            measured = []
            for p in providers:
                log(f'[{p.name}] filling {n} items (replace={not args.no_replace})')
                if p.fill(n):
                    measured.append(p)
            samples, rounds = measure(measured, args, rng) if measured else ({}, {})
            for p in providers:
                entry = {'provider': p.name, 'command': p.command, 'n': n, 'filled': p.filled,
                         'fill_finished': p.fill_finished, 'fill_seconds': p.fill_seconds, 'rss_kb': p.rss_kb,
                         'anon_kb': p.anon_kb, 'private_kb': p.private_kb}
                if p.fill_finished:
                    s = samples[p.name]
                    entry.update({f'{k}_{stat}': fn(s[k]) for k in KINDS
                                  for stat, fn in (('median', statistics.median),
                                                   ('p90', lambda v: percentile(v, 90)))})
                    entry['samples'] = s
                    entry['batch_medians'] = rounds[p.name]
                    rows.append([p.name, n, f'{p.fill_seconds:.2f}', f'{n / p.fill_seconds:.0f}',
                                 f'{p.rss_kb / 1024:.1f}' if p.rss_kb else '?',
                                 f'{p.anon_kb / 1024:.1f}' if p.anon_kb else '?',
                                 f'{p.private_kb / 1024:.1f}' if p.private_kb else '?']
                                + [f'{entry[f"{k}_{stat}"]:.3f}' for k in KINDS for stat in ('median', 'p90')]
                                + [f'{entry["get_median"] / entry["ping_median"]:.2f}'])
                else:
                    rows.append([p.name, n, f'not finished ({p.filled}/{n} in {p.fill_seconds:.0f} s)', '-', '-']
                                + ['-'] * 11)
                results.append(entry)
            for p in providers:
                p.stop()
                live.remove(p)
    except KeyboardInterrupt:
        log('interrupted')
        status = 130
    except (RuntimeError, dbus.DBusException) as e:
        log(f'error: {e}')
        status = 1
    finally:
        for p in live:
            p.stop()
    print_table(rows)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'args': vars(args), 'results': results}, f, indent=1)
        log(f'wrote {args.json}')
    sys.exit(status)


if __name__ == '__main__':
    main()
