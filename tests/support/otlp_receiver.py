"""An OTLP receiver for the tests, on the official protobufs (opentelemetry-proto) and grpcio:
OTLP/gRPC (LogsService, MetricsService) and OTLP/HTTP (POST /v1/logs, /v1/metrics, protobuf,
gzip or not) on 127.0.0.1. It writes every record it accepts to OUT as a JSON line, and can be
told to fail: the first N requests (or every one) answered UNAVAILABLE / 503 (retryable), or
every request refused with INVALID_ARGUMENT / 400 (not retryable); or to answer slowly.

    python otlp_receiver.py OUT [--fail-first N] [--fail-always] [--refuse] [--delay S]
                                [--tls CERT KEY] [--grpc-port P] [--http-port P]
                                [--otlp-json FILE]

--otlp-json also writes every logs request it accepts to FILE as one line of OTLP/JSON (the
protobuf JSON mapping, as an OpenTelemetry Collector's file exporter writes it).

--delay holds every request S seconds before answering it. The ports default to free ones; a
receiver started again on the same ports is the same receiver back.

With --tls both listen with TLS (the certificate and key in PEM).

It prints {"grpc": PORT, "http": PORT} on its first line once both listen, and serves until
killed.
"""

import argparse
import gzip
import json
import os
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)

args = argparse.ArgumentParser()
args.add_argument("out")
args.add_argument("--fail-first", type=int, default=0)
args.add_argument("--refuse", action="store_true")
args.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
args.add_argument("--fail-always", action="store_true")
args.add_argument("--delay", type=float, default=0.0)
args.add_argument("--grpc-port", type=int, default=0)
args.add_argument("--http-port", type=int, default=0)
args.add_argument("--otlp-json")
opts = args.parse_args()

lock = threading.Lock()
out = os.open(opts.out, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
# A receiver killed while writing may have cut its last line short: what follows starts a line
# of its own.
if os.lseek(out, 0, os.SEEK_END) > 0:
    os.lseek(out, -1, os.SEEK_END)
    if os.read(out, 1) != b"\n":
        os.write(out, b"\n")
requests = {"n": 0}


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def verdict():
    """None to accept the request; 'retry' or 'refuse' to fail it."""
    with lock:
        requests["n"] += 1
        n = requests["n"]
    if opts.delay > 0:
        time.sleep(opts.delay)
    if opts.refuse:
        return "refuse"
    if opts.fail_always or n <= opts.fail_first:
        return "retry"
    return None


def write(lines):
    """A request's lines, in one write: a receiver killed meanwhile leaves none of them or all
    (and, not having answered, gets them again)."""
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    with lock:
        while data:
            data = data[os.write(out, data) :]


def logs(req, transport, headers):
    if opts.otlp_json:
        line = json.dumps(json_format.MessageToDict(req, use_integers_for_enums=True)) + "\n"
        with lock:
            with open(opts.otlp_json, "a") as f:
                f.write(line)
    lines = []
    for rl in req.resource_logs:
        resource = attributes(rl.resource.attributes)
        for sl in rl.scope_logs:
            for r in sl.log_records:
                lines.append(
                    {
                        "signal": "log",
                        "transport": transport,
                        "headers": headers,
                        "resource": resource,
                        "scope": sl.scope.name,
                        "event": r.event_name,
                        "severity": r.severity_text,
                        "time": r.time_unix_nano,
                        "attributes": attributes(r.attributes),
                    }
                )
    write(lines)


def metrics(req, transport, headers):
    lines = []
    for rm in req.resource_metrics:
        resource = attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.sum.data_points:
                    lines.append(
                        {
                            "signal": "metric",
                            "transport": transport,
                            "headers": headers,
                            "resource": resource,
                            "name": m.name,
                            "unit": m.unit,
                            "temporality": m.sum.aggregation_temporality,
                            "start": p.start_time_unix_nano,
                            "time": p.time_unix_nano,
                            "value": p.as_int,
                        }
                    )
    write(lines)


def grpc_verdict(context):
    """Fails the gRPC request as told (abort raises), or lets it through."""
    v = verdict()
    if v == "retry":
        context.abort(grpc.StatusCode.UNAVAILABLE, "told to fail")
    if v == "refuse":
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "told to refuse")


class Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def Export(self, request, context):
        grpc_verdict(context)
        logs(request, "grpc", dict(context.invocation_metadata()))
        return logs_service_pb2.ExportLogsServiceResponse()


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def Export(self, request, context):
        grpc_verdict(context)
        metrics(request, "grpc", dict(context.invocation_metadata()))
        return metrics_service_pb2.ExportMetricsServiceResponse()


class Http(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        v = verdict()
        if v is not None:
            self.send_response(503 if v == "retry" else 400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        if self.path == "/v1/logs":
            logs(logs_service_pb2.ExportLogsServiceRequest.FromString(body), "http", headers)
            answer = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
        elif self.path == "/v1/metrics":
            metrics(
                metrics_service_pb2.ExportMetricsServiceRequest.FromString(body), "http", headers
            )
            answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


server = grpc.server(
    futures.ThreadPoolExecutor(max_workers=4),
    options=[("grpc.max_receive_message_length", 64 << 20)],
)
logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
if opts.tls:
    cert, key = (open(f, "rb").read() for f in opts.tls)
    grpc_port = server.add_secure_port(
        f"127.0.0.1:{opts.grpc_port}", grpc.ssl_server_credentials([(key, cert)])
    )
else:
    grpc_port = server.add_insecure_port(f"127.0.0.1:{opts.grpc_port}")
server.start()
ThreadingHTTPServer.allow_reuse_address = True
http = ThreadingHTTPServer(("127.0.0.1", opts.http_port), Http)
if opts.tls:
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*opts.tls)
    http.socket = context.wrap_socket(http.socket, server_side=True)
threading.Thread(target=http.serve_forever, daemon=True).start()
print(json.dumps({"grpc": grpc_port, "http": http.server_address[1]}), flush=True)
server.wait_for_termination()
