"""Unit tests of scripts/bench/aws_call_counter.py's classification, one request of each protocol as the SDKs send
it. Run by tests/it/aws_call_counter.rs (`python3 -m unittest` on this file); standard library only."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aws_call_counter import classify, http_operation  # noqa: E402


def auth(service, key="OURS_WORKER"):
    return {
        "authorization": f"AWS4-HMAC-SHA256 Credential={key}/20261202/us-east-1/{service}/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=0123abcd"
    }


class Classify(unittest.TestCase):
    def test_json_protocols_by_target(self):
        headers = auth("sqs") | {"x-amz-target": "AmazonSQS.ReceiveMessage"}
        self.assertEqual(classify("POST", "/", headers, b"{}"), ("ours_worker", "sqs", "ReceiveMessage"))
        headers = auth("ecs") | {"x-amz-target": "AmazonEC2ContainerServiceV20141113.DescribeServices"}
        self.assertEqual(classify("POST", "/", headers, b"{}")[1:], ("ecs", "DescribeServices"))

    def test_cloudwatch_in_cbor_and_in_the_query_protocol(self):
        headers = auth("monitoring") | {"smithy-protocol": "rpc-v2-cbor"}
        path = "/service/GraniteServiceVersion20100801/operation/GetMetricData"
        self.assertEqual(classify("POST", path, headers, b"\xa0")[1:], ("cloudwatch", "GetMetricData"))
        headers = auth("monitoring") | {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}
        body = b"Action=PutMetricData&Version=2010-08-01&Namespace=Custom%2FECSInference"
        self.assertEqual(classify("POST", "/", headers, body)[1:], ("cloudwatch", "PutMetricData"))
        self.assertEqual(classify("GET", "/?Action=ListMetrics&Version=2010-08-01", auth("monitoring"), b"")[2],
                         "ListMetrics")

    def test_s3_by_method_path_and_query(self):
        s3 = auth("s3") | {"host": "127.0.0.1:15257"}
        cases = [
            ("PUT", "/results-bucket/results/abc.json", {}, "PutObject"),
            ("GET", "/results-bucket/results/abc.json", {}, "GetObject"),
            ("HEAD", "/results-bucket/results/abc.json", {}, "HeadObject"),
            ("DELETE", "/results-bucket/results/abc.json", {}, "DeleteObject"),
            ("GET", "/results-bucket?list-type=2&prefix=results%2F", {}, "ListObjectsV2"),
            ("GET", "/results-bucket?prefix=results%2F", {}, "ListObjects"),
            ("PUT", "/results-bucket", {}, "CreateBucket"),
            ("HEAD", "/results-bucket", {}, "HeadBucket"),
            ("POST", "/results-bucket?delete", {}, "DeleteObjects"),
            ("PUT", "/results-bucket/copy.json", {"x-amz-copy-source": "/results-bucket/abc.json"}, "CopyObject"),
            ("POST", "/results-bucket/big.bin?uploads", {}, "CreateMultipartUpload"),
            ("PUT", "/results-bucket/big.bin?partNumber=1&uploadId=u1", {}, "UploadPart"),
            ("POST", "/results-bucket/big.bin?uploadId=u1", {}, "CompleteMultipartUpload"),
            ("GET", "/", {}, "ListBuckets"),
        ]
        for method, target, extra, operation in cases:
            with self.subTest(method=method, target=target):
                self.assertEqual(classify(method, target, s3 | extra, b""), ("ours_worker", "s3", operation))

    def test_s3_virtual_hosted_style(self):
        headers = auth("s3") | {"host": "results-bucket.s3.us-east-1.amazonaws.com"}
        self.assertEqual(classify("GET", "/results/abc.json", headers, b"")[2], "GetObject")
        self.assertEqual(classify("GET", "/?list-type=2", headers, b"")[2], "ListObjectsV2")

    def test_lambda_invoke_and_unknown_rest_calls(self):
        path = "/2015-03-31/functions/gpuinfer-router/invocations"
        self.assertEqual(classify("POST", path, auth("lambda"), b"{}")[1:], ("lambda", "Invoke"))
        unknown = classify("GET", "/2015-03-31/functions/gpuinfer-router", auth("lambda"), b"")
        self.assertEqual(unknown[2], "GET /2015-03-31/functions/gpuinfer-router")

    def test_the_caller_is_the_access_key_and_unsigned_calls_are_named(self):
        headers = auth("sqs", key="SAMPLE_WORKER") | {"x-amz-target": "AmazonSQS.DeleteMessage"}
        self.assertEqual(classify("POST", "/", headers, b"")[0], "sample_worker")
        self.assertEqual(classify("GET", "/moto-api/", {}, b"")[:2], ("unsigned", "unknown"))

    def test_plain_http_requests_by_path_with_ids_replaced(self):
        target = "/results/8d3f2b1c-4a5e-4f60-9b7a-0c1d2e3f4a5b?wait=1"
        self.assertEqual(http_operation("GET", target), "GET /results/{id}")
        self.assertEqual(http_operation("POST", "/infer"), "POST /infer")


if __name__ == "__main__":
    unittest.main()
