# Sends N /v1/events from C keep-alive connections at once (threads); each routes (new entity).
# Usage: events_parallel.py N TAG [C=16] (against bench/scripts/callgrind.toml on 127.0.0.1:18181).
# The body is serial_events.py's; BENCHMARKS.md rounds 21-25 count instructions per answer with it.
import http.client, json, sys, threading
n = int(sys.argv[1]); tag = sys.argv[2]; conns = int(sys.argv[3]) if len(sys.argv) > 3 else 16
routed = [0] * conns
def send(k):
    c = http.client.HTTPConnection("127.0.0.1", 18181, timeout=120)
    for i in range(k, n, conns):
        body = json.dumps({"channel": "webhook", "event_type": "ticket.created", "tenant_id": "acme",
                           "target_entity_id": f"{tag}-{i}", "payload": {"subject": "Printer on fire"}})
        c.request("POST", "/v1/events", body, {"Authorization": "Bearer callgrind-token-0001",
                                                "Idempotency-Key": f"{tag}-{i}", "Content-Type": "application/json"})
        r = c.getresponse(); data = r.read()
        if json.loads(data)["outcome"] == "routed": routed[k] += 1
threads = [threading.Thread(target=send, args=(k,)) for k in range(conns)]
for t in threads: t.start()
for t in threads: t.join()
print(f"{sum(routed)} of {n} routed")
