# Sends N signed Zendesk event-subscription webhooks (switchyard-bench's body, workload.rs) from C
# keep-alive connections (threads); each routes (new ticket). Against
# bench/scripts/callgrind_webhook.toml on 127.0.0.1:18181, whose source's secret is `cg-secret`
# (CG_ZENDESK_SECRET). Usage: webhooks_parallel.py N TAG [C=16]. BENCHMARKS.md round 27.
import http.client, hmac, hashlib, base64, datetime, sys, threading, json
n = int(sys.argv[1]); tag = sys.argv[2]; conns = int(sys.argv[3]) if len(sys.argv) > 3 else 16
A = '{"account_id":22129848,"detail":{"actor_id":"8447388090494","assignee_id":"8447388090494","brand_id":"8447346621310","created_at":"2025-01-08T10:12:07Z","custom_status":"8447320465790","description":"The printer on the third floor is on fire again; please send someone with an extinguisher.","external_id":null,"form_id":"8646151517822","group_id":"8447320466430","id":"'
B = '","is_public":true,"organization_id":"8447346622462","priority":"LOW","requester_id":"8447388090494","status":"OPEN","subject":"Printer on fire","submitter_id":"8447388090494","tags":["printer","fire"],"type":"TASK","updated_at":"2025-01-08T10:12:07Z","via":{"channel":"web_service"}},"event":{},"id":"'
C = '","subject":"zen:ticket:'
D = '","time":"2025-01-08T10:12:07.672717030Z","type":"zen:event-type:ticket.created","zendesk_event_version":"2022-11-06"}'
routed = [0] * conns
def send(k):
    c = http.client.HTTPConnection("127.0.0.1", 18181, timeout=120)
    for i in range(k, n, conns):
        t = f"{tag}-{i}"
        body = (A + t + B + t + C + t + D).encode()
        ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        sig = base64.b64encode(hmac.new(b"cg-secret", ts.encode() + body, hashlib.sha256).digest()).decode()
        c.request("POST", "/v1/ingest/webhook/zendesk", body, {"Content-Type": "application/json",
                  "X-Zendesk-Webhook-Signature": sig, "X-Zendesk-Webhook-Signature-Timestamp": ts})
        r = c.getresponse(); data = r.read()
        if r.status == 200 and json.loads(data).get("outcome") == "routed": routed[k] += 1
        elif k == 0 and i < 3: print(r.status, data[:200])
threads = [threading.Thread(target=send, args=(k,)) for k in range(conns)]
for t in threads: t.start()
for t in threads: t.join()
print(f"{sum(routed)} of {n} routed")
