# Sends N /v1/events one after another over one keep-alive connection; each routes (new entity).
# Usage: serial_events.py N TAG (against bench/scripts/callgrind.toml on 127.0.0.1:18181).
import http.client, json, sys
n = int(sys.argv[1]); tag = sys.argv[2]
c = http.client.HTTPConnection("127.0.0.1", 18181, timeout=60)
routed = 0
for i in range(n):
    body = json.dumps({"channel": "webhook", "event_type": "ticket.created", "tenant_id": "acme",
                       "target_entity_id": f"{tag}-{i}", "payload": {"subject": "Printer on fire"}})
    c.request("POST", "/v1/events", body, {"Authorization": "Bearer callgrind-token-0001", "Idempotency-Key": f"{tag}-{i}",
                                            "Content-Type": "application/json"})
    r = c.getresponse(); data = r.read()
    if json.loads(data)["outcome"] == "routed": routed += 1
print(f"{routed} of {n} routed")
