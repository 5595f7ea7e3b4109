"""Celery's Redis broker keeps one client per channel (mcplet_host.broker), and speaks kombu's
own wire format: a stock kombu consumer reads what the host publishes."""

import uuid

import pytest
from kombu import Connection

from mcplet_host.broker import Transport
from mcplet_host.celery import app, enqueue

pytestmark = pytest.mark.services


@pytest.fixture
def queue():
    name = f"test-broker-{uuid.uuid4().hex}"
    yield name
    with app.connection_for_write() as connection:
        connection.default_channel.client.delete(name)


def test_the_host_publishes_through_its_transport():
    with app.connection_for_write() as connection:
        assert isinstance(connection.transport, Transport)


def test_a_channel_keeps_one_client_until_its_pool_is_replaced(queue):
    with app.connection_for_write() as connection:
        channel = connection.channel()
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second and first.connection_pool is channel.pool
        first.lpush(queue, b"one")
        channel._disconnect_pools()  # what kombu does once a connection broke
        with channel.conn_or_acquire() as third:
            assert third is not first and third.connection_pool is channel.pool
            assert third.llen(queue) == 1  # the new pool reaches the same Redis
        given = object()
        with channel.conn_or_acquire(given) as passed:
            assert passed is given  # a caller's own client is used as given
        channel.close()


def test_what_it_publishes_a_stock_kombu_consumer_reads(queue):
    for ceremony in range(3):
        enqueue("agents.resume_run", [ceremony, "ref"], queue=queue)
    stock = Connection(app.conf.broker_url, transport="redis")  # kombu's own transport
    with stock, stock.SimpleQueue(queue) as received:
        bodies = [received.get(timeout=5) for _ in range(3)]
        for message in bodies:
            message.ack()
    assert [message.headers["task"] for message in bodies] == ["agents.resume_run"] * 3
    assert [message.payload[0] for message in bodies] == [[0, "ref"], [1, "ref"], [2, "ref"]]
