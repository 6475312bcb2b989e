"""TensorBoard event files, written without TensorFlow: the TFRecord framing
(length, masked CRC-32C of the length, payload, masked CRC-32C of the
payload) around hand-encoded tensorflow.Event protocol buffers holding
scalar summaries (Summary.Value.simple_value), which TensorBoard's scalars
dashboard reads."""
import os
import socket
import struct
import time


def _crc32c_table():
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli) of `data` (bytes)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, wire_type):
    return _varint((number << 3) | wire_type)


def _bytes_field(number, payload):
    return _field(number, 2) + _varint(len(payload)) + payload


def event(wall_time, step=None, file_version=None, scalars=None):
    """A serialized tensorflow.Event: wall_time (1, double), step (2,
    int64), file_version (3, string), summary (5) of scalar values
    (Summary.value = 1: tag = 1, simple_value = 2)."""
    out = _field(1, 1) + struct.pack("<d", wall_time)
    if step is not None:
        out += _field(2, 0) + _varint(step & 0xFFFFFFFFFFFFFFFF)
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if scalars:
        summary = b"".join(
            _bytes_field(1, _bytes_field(1, tag.encode()) + _field(2, 5) +
                         struct.pack("<f", float(value)))
            for tag, value in scalars.items())
        out += _bytes_field(5, summary)
    return out


def record(payload):
    """One TFRecord around `payload`."""
    length = struct.pack("<Q", len(payload))
    return (length + struct.pack("<I", masked_crc32c(length)) + payload +
            struct.pack("<I", masked_crc32c(payload)))


class EventFileWriter:
    """Appends scalar events to a new events.out.tfevents.* file in
    `log_dir` (created when missing)."""

    def __init__(self, log_dir, clock=time.time):
        os.makedirs(log_dir, exist_ok=True)
        self._clock = clock
        self.path = os.path.join(log_dir, "events.out.tfevents.%d.%s.%d.v2" % (
            int(clock()), socket.gethostname(), os.getpid()))
        self._file = open(self.path, "wb")
        self._file.write(record(event(clock(), file_version="brain.Event:2")))
        self._file.flush()

    def scalars(self, step, values):
        self._file.write(record(event(self._clock(), step=step, scalars=values)))
        self._file.flush()

    def close(self):
        self._file.close()
