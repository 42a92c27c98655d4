"""A `refit serve` process for the end-to-end tests: started on a free port (alone, or
under mpirun for tensor parallelism), spoken to over loopback HTTP, stopped by SIGTERM.

    s = RefitServer(refit_binary, model, "--logprobs-mode", "sglang")
    status, body = s.post("/generate", {"input_ids": [1, 2, 3]})   # body: JSON, or the text
    rc = s.stop()                                                  # the exit code, or "timeout"
"""
import json
import os
import re
import signal
import subprocess
import threading
import urllib.error
import urllib.request


class RefitServer:
    def __init__(self, refit, model, *extra, tp=1, env=None):
        cmd = [refit, "serve", "-m", model, "--port", "0", "-t", "1", *extra]
        if tp > 1:
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(tp)] + cmd + ["--tp", str(tp)]
        self.model = model
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.stderr = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        # The first line names the port and the pid that SIGTERM stops (rank 0's under mpirun).
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://[^:]+:(\d+) .*pid (\d+)\)", line)
        if not m:
            self.proc.kill()
            raise SystemExit(f"server for {model} did not start: {line!r} {''.join(self.stderr)}")
        self.port, self.pid = int(m.group(1)), int(m.group(2))
        self.base = f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, raw=None, timeout=120):
        """(status, the parsed JSON answer, or its text when it is not JSON; {} when empty)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, answer = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, answer = e.code, e.read()
        if not answer:
            return status, {}
        try:
            return status, json.loads(answer)
        except ValueError:
            return status, answer.decode(errors="replace")

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, raw=None, **kw):
        return self.request("POST", path, body if body is not None or raw is not None else {}, raw=raw, **kw)

    def stream(self, path, body, timeout=120):
        """The `data:` payloads of a server-sent-event answer, in order."""
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        events = []
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: "):
                    events.append(line[6:])
        return events

    def rss_kib(self, pid=None):
        with open(f"/proc/{pid or self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def worker_pids(self):
        """Under mpirun: the ranks other than the lead (descendants of mpirun)."""
        out = subprocess.run(["pgrep", "-f", "refit serve"], capture_output=True, text=True).stdout.split()
        return [int(p) for p in out if int(p) not in (self.pid, self.proc.pid) and self._descends(int(p))]

    def _descends(self, pid):
        while pid > 1:
            if pid == self.proc.pid:
                return True
            try:
                with open(f"/proc/{pid}/stat") as f:
                    pid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                return False
        return False

    def stop(self, timeout=30):
        """SIGTERM to the lead (it stops every rank); the exit code, or "timeout"."""
        os.kill(self.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return "timeout"
