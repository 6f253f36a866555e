"""The DynamoDB bench's journaled moto (``bench/_moto_txn_journal.py``) keeps moto's
transaction semantics: the same random transactions (puts, conditional updates,
deletes, condition checks; some cancelled, some refused as malformed) leave every table
exactly as stock moto leaves them, with the same outcome for each. Stock moto, in a
process of its own, is the model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"

# Run in a new interpreter per moto (the patch changes moto for the whole process).
_SCRIPT = r"""
import json, random, sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "journal":
    import _moto_txn_journal; _moto_txn_journal.install()
import boto3, botocore.exceptions
from moto import mock_aws

with mock_aws():
    c = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="k")
    c.create_table(TableName="a", KeySchema=[{"AttributeName": "h", "KeyType": "HASH"},
                                             {"AttributeName": "r", "KeyType": "RANGE"}],
                   AttributeDefinitions=[{"AttributeName": "h", "AttributeType": "S"},
                                         {"AttributeName": "r", "AttributeType": "N"}],
                   BillingMode="PAY_PER_REQUEST")
    c.create_table(TableName="b", KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                   AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                   BillingMode="PAY_PER_REQUEST")
    rnd = random.Random(7)

    def op(used):
        while True:
            t = rnd.choice("ab")
            key = ({"h": {"S": rnd.choice("xy")}, "r": {"N": str(rnd.randrange(4))}} if t == "a"
                   else {"k": {"S": rnd.choice("pqrs")}})
            if (t, json.dumps(key, sort_keys=True)) not in used:
                used.add((t, json.dumps(key, sort_keys=True)))
                break
        kind = rnd.choices(["put", "put_new", "update", "delete", "check", "bad_update"], [4, 3, 4, 2, 2, 1])[0]
        if kind in ("put", "put_new"):
            body = {"Put": {"TableName": t, "Item": {**key, "v": {"N": str(rnd.randrange(100))},
                                                      "m": {"M": {"l": {"L": [{"S": "z"}]}}}}}}
            if kind == "put_new":
                body["Put"]["ConditionExpression"] = "attribute_not_exists(v)"
            return body
        if kind == "update":
            return {"Update": {"TableName": t, "Key": key, "UpdateExpression": "ADD v :one SET m.l = :l",
                               "ConditionExpression": "attribute_exists(v)",
                               "ExpressionAttributeValues": {":one": {"N": "1"}, ":l": {"L": [{"S": "w"}]}}}}
        if kind == "bad_update":  # a number added to a string: refused after the earlier items are applied
            return {"Update": {"TableName": t, "Key": key, "UpdateExpression": "SET s = :s ADD s :one",
                               "ExpressionAttributeValues": {":s": {"S": "x"}, ":one": {"N": "1"}}}}
        if kind == "delete":
            return {"Delete": {"TableName": t, "Key": key, "ConditionExpression": "attribute_exists(v)"}}
        return {"ConditionCheck": {"TableName": t, "Key": key, "ConditionExpression": "v < :n",
                                   "ExpressionAttributeValues": {":n": {"N": "50"}}}}

    outcomes = []
    for _ in range(300):
        used = set()
        items = [op(used) for _ in range(rnd.randrange(1, 6))]
        try:
            c.transact_write_items(TransactItems=items)
            outcomes.append("ok")
        except botocore.exceptions.ClientError as e:
            outcomes.append(e.response["Error"]["Code"])
    tables = {t: sorted(json.dumps(i, sort_keys=True) for i in c.scan(TableName=t)["Items"]) for t in "ab"}
    print(json.dumps({"outcomes": outcomes, "tables": tables}))
"""


def _run(txn: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(BENCH), txn], capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout)


def test_the_journaled_moto_leaves_every_table_as_stock_moto_does() -> None:
    stock, journal = _run("stock"), _run("journal")
    assert journal["outcomes"] == stock["outcomes"]
    kinds = set(stock["outcomes"])
    assert {"ok", "TransactionCanceledException", "ValidationException"} <= kinds, kinds  # every path was taken
    assert journal["tables"] == stock["tables"]
    assert stock["tables"]["a"] and stock["tables"]["b"]
