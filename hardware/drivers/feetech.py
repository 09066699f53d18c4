"""A Feetech STS3215 servo bus over a serial port, on ``feetech-servo-sdk`` (import ``scservo_sdk``, the
library LeRobot uses; optional extra ``feetech``).

Protocol (Feetech SCS/STS "protocol 0", little-endian words on the STS series): an instruction packet is
``FF FF id len instr params... checksum`` with ``len = len(params) + 2`` and
``checksum = ~(id + len + instr + sum(params)) & 0xFF``; a servo answers with a status packet
``FF FF id len error params... checksum`` whose ``error`` byte holds the fault flags in
:data:`ERROR_FLAGS`. Instructions used: ping (1), read (2), write (3), sync read (0x82) and sync write
(0x83) to the broadcast id 0xFE (sync write gets no answer; sync read gets one status packet per servo,
in the order asked).

STS3215 units (Feetech's memory table; the registers below are the ones this package uses):

- position: ticks, 4096 per turn (0..4095 = one turn, :data:`TICKS_PER_TURN`; 1 tick = 0.0879 deg);
- speed: ticks/s, sign-magnitude with the sign in bit 15 (50 ticks/s = 0.732 rpm);
- acceleration register: 100 ticks/s² per unit (0 = the servo's maximum);
- voltage: 0.1 V; temperature: deg C; current: 6.5 mA per unit; load: 0.1 % of stall torque, sign in bit 10.

The bus raises the typed errors of :mod:`robot_rl.hardware.errors`:
:class:`RobotConnectionError` naming the port (missing, busy, link lost), :class:`RobotTimeoutError`
naming the servo id that did not answer, :class:`RobotFault` naming the servo id and the flag (a corrupt
or truncated status packet, i.e. a checksum error, or an error flag set by the servo).
"""

from __future__ import annotations

import select
import threading
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from robot_rl.hardware.errors import MissingExtraError, RobotConnectionError, RobotFault, RobotTimeoutError

try:
    from termios import error as _TermiosError
except ImportError:  # Windows: pyserial raises OSError subclasses only
    _TermiosError = OSError

FEETECH_EXTRA = "pip install 'robot-rl[feetech]'"
TICKS_PER_TURN = 4096
"""Encoder ticks per revolution (position registers are 0..4095)."""
STS3215_MODEL = 777
"""Model number an STS3215 reports at :data:`MODEL_NUMBER`."""
DEFAULT_BAUDRATE = 1_000_000
"""Baud rate of a stock SO-101 bus (bit/s)."""
BROADCAST_ID = 0xFE
"""Instruction packets to this id reach every servo (sync read/write)."""


class Register(NamedTuple):
    """A control-table entry: byte ``address`` and ``size`` (1 or 2 bytes, little-endian)."""

    address: int
    size: int


MODEL_NUMBER = Register(3, 2)
"""EEPROM: model number (:data:`STS3215_MODEL`)."""
ID = Register(5, 1)
"""EEPROM: servo id, 0..252."""
MIN_POSITION_LIMIT = Register(9, 2)
"""EEPROM: lowest goal position the servo accepts (ticks)."""
MAX_POSITION_LIMIT = Register(11, 2)
"""EEPROM: highest goal position the servo accepts (ticks)."""
MAX_TORQUE_LIMIT = Register(16, 2)
"""EEPROM: largest output torque, 0.1 % of the stall torque per unit (1000 = 100 %)."""
P_COEFFICIENT = Register(21, 1)
"""EEPROM: position loop proportional gain (factory 32)."""
D_COEFFICIENT = Register(22, 1)
"""EEPROM: position loop derivative gain (factory 32)."""
I_COEFFICIENT = Register(23, 1)
"""EEPROM: position loop integral gain (factory 0)."""
PROTECTION_CURRENT = Register(28, 2)
"""EEPROM: current above which the servo protects itself, 6.5 mA per unit."""
OPERATING_MODE = Register(33, 1)
"""EEPROM: 0 position (servo) mode, 1 wheel speed, 2 PWM, 3 step."""
OVERLOAD_TORQUE = Register(36, 1)
"""EEPROM: output torque (% of the maximum) the servo falls back to after an overload."""
TORQUE_ENABLE = Register(40, 1)
"""SRAM: 1 = drive to Goal_Position, 0 = limp. On enable the servo moves to Goal_Position at once, so
write Goal_Position = Present_Position first."""
ACCELERATION = Register(41, 1)
"""SRAM: profile acceleration, 100 ticks/s² per unit (0 = maximum)."""
GOAL_POSITION = Register(42, 2)
"""SRAM: target position (ticks, 0..4095)."""
GOAL_VELOCITY = Register(46, 2)
"""SRAM: profile speed (ticks/s, 0 = maximum)."""
PRESENT_POSITION = Register(56, 2)
"""SRAM (read-only): measured position (ticks, 0..4095)."""
PRESENT_VELOCITY = Register(58, 2)
"""SRAM (read-only): measured speed (ticks/s, sign-magnitude, sign bit 15)."""
PRESENT_VOLTAGE = Register(62, 1)
"""SRAM (read-only): supply voltage (0.1 V)."""
PRESENT_TEMPERATURE = Register(63, 1)
"""SRAM (read-only): temperature (deg C)."""

VELOCITY_SIGN_BIT = 15
ERROR_FLAGS = {
    1: "input voltage",
    2: "angle sensor",
    4: "overheat",
    8: "overcurrent",
    32: "overload",
}
"""Status-packet error bits (Feetech) -> name."""

_RESULTS = {  # scservo_sdk COMM_* codes
    -1: "port busy",
    -2: "transmit failed",
    -3: "receive failed",
    -4: "bad instruction packet",
    -6: "no status packet (timeout)",
    -7: "corrupt status packet (checksum error or truncated)",
    -9: "not available",
}
COMM_SUCCESS, COMM_RX_TIMEOUT, COMM_RX_CORRUPT = 0, -6, -7


def decode_sign_magnitude(value: int, sign_bit: int) -> int:
    """Feetech sign-magnitude word -> int: bit ``sign_bit`` set means negative."""
    magnitude = value & ((1 << sign_bit) - 1)
    return -magnitude if value & (1 << sign_bit) else magnitude


def encode_sign_magnitude(value: int, sign_bit: int) -> int:
    """int -> Feetech sign-magnitude word (inverse of :func:`decode_sign_magnitude`)."""
    if abs(value) >= 1 << sign_bit:
        raise ValueError(f"{value} does not fit a sign-magnitude word with sign bit {sign_bit}")
    return (-value | (1 << sign_bit)) if value < 0 else value


def error_flag_names(error: int) -> str:
    """Names of the flags set in a status packet's error byte, e.g. ``"overheat, overload"``."""
    names = [name for bit, name in ERROR_FLAGS.items() if error & bit]
    unknown = error & ~sum(ERROR_FLAGS)
    if unknown:
        names.append(f"unknown flags 0x{unknown:02x}")
    return ", ".join(names)


def _sdk():
    try:
        import scservo_sdk
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in ("scservo_sdk", "serial"):
            raise MissingExtraError(
                f"the Feetech bus needs the optional package '{e.name}'; run {FEETECH_EXTRA}"
            ) from e
        raise
    return scservo_sdk


class FeetechBus:
    """One half-duplex Feetech bus (STS3215 servos) on a serial port.

    The port is opened with an exclusive lock (``flock``), so a second program using this class (or
    pyserial with ``exclusive=True``) cannot talk on the same bus at the same time. Every transaction
    clears stale input first (a late answer from a timed-out servo cannot be taken for the next one) and
    is serialised by a lock, so one bus may be shared between threads.

    Args:
        port: serial device (``/dev/ttyACM0``, ``/dev/serial/by-id/...``, a pty path).
        baudrate: bit/s (the servos' EEPROM setting; 1 000 000 on a stock SO-101).
        name: prefix of error messages (the robot using the bus).
        timeout_s: how long to wait for a status packet (s) beyond its transmit time; ``None``: the SDK's
            34 ms (twice a USB adapter's 16 ms latency timer, plus 2 ms).

    Raises:
        MissingExtraError: ``feetech-servo-sdk`` / ``pyserial`` not installed (names the extra), raised
            by :meth:`open`.
    """

    def __init__(
        self,
        port: str,
        baudrate: int = DEFAULT_BAUDRATE,
        name: str = "feetech",
        timeout_s: float | None = None,
    ) -> None:
        self.port = port
        self.timeout_s = timeout_s
        self.baudrate = baudrate
        self.name = name
        self._lock = threading.Lock()
        self._port = None
        self._packets = None

    @property
    def is_open(self) -> bool:
        return self._port is not None

    def open(self) -> None:
        """Open and lock the port.

        Raises:
            RobotConnectionError: the port does not exist, cannot be opened (permissions) or is held by
                another program; the message names the port.
            MissingExtraError: the ``feetech`` extra is missing.
        """
        if self._port is not None:
            return
        sdk = _sdk()
        import serial

        handler = _port_class(sdk, serial, self.timeout_s)(self.port)
        handler.baudrate = self.baudrate
        try:
            ok = handler.openPort()
        except (serial.SerialException, OSError) as e:
            raise RobotConnectionError(
                f"{self.name}: cannot open serial port {self.port!r}: {_why(e)}"
            ) from e
        if not ok:
            raise RobotConnectionError(
                f"{self.name}: serial port {self.port!r}: unsupported baud rate {self.baudrate}"
            )
        self._port = handler
        self._packets = sdk.PacketHandler(0)  # 0: little-endian words (STS series)

    def close(self) -> None:
        """Release the port; safe to call twice."""
        if self._port is not None:
            try:
                self._port.closePort()
            finally:
                self._port = None

    def __enter__(self) -> FeetechBus:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- transactions -------------------------------------------------------------------------------

    def _begin(self):
        if self._port is None:
            raise RobotConnectionError(f"{self.name}: bus on {self.port!r} is not open")
        try:
            self._port.ser.reset_input_buffer()
        except (OSError, _TermiosError) as e:  # the device went away
            raise RobotConnectionError(f"{self.name}: serial port {self.port!r} lost: {_why(e)}") from e
        return self._port, self._packets

    def _check(self, result: int, error: int, servo_id: int, what: str) -> None:
        if result == COMM_RX_TIMEOUT:
            raise RobotTimeoutError(
                f"{self.name}: servo {servo_id} on {self.port!r} did not answer {what} "
                "(check its power, cable and id)"
            )
        if result == COMM_RX_CORRUPT:
            raise RobotFault(
                f"{self.name}: servo {servo_id} on {self.port!r}: checksum error "
                f"(corrupt or truncated status packet) on {what}"
            )
        if result != COMM_SUCCESS:
            raise RobotConnectionError(
                f"{self.name}: serial port {self.port!r}: {_RESULTS.get(result, result)} on {what} "
                f"(servo {servo_id})"
            )
        if error:
            raise RobotFault(
                f"{self.name}: servo {servo_id} on {self.port!r} reports an error: {error_flag_names(error)} "
                f"(status 0x{error:02x}) on {what}"
            )

    def _check_tx(self, result: int, what: str) -> None:
        if result != COMM_SUCCESS:
            raise RobotConnectionError(
                f"{self.name}: serial port {self.port!r}: {_RESULTS.get(result, result)} on {what}"
            )

    def _io(self, fn, *args):
        try:
            return fn(*args)
        except (OSError, _TermiosError) as e:  # serial.SerialException is an OSError: device unplugged
            raise RobotConnectionError(f"{self.name}: serial port {self.port!r} lost: {_why(e)}") from e

    def ping(self, servo_id: int) -> int:
        """Ping ``servo_id`` and return its model number (reads :data:`MODEL_NUMBER`).

        Raises:
            RobotTimeoutError: the servo does not answer (names the id).
            RobotFault: checksum error or error flags (names the id and flag).
            RobotConnectionError: the port is closed or lost.
        """
        with self._lock:
            port, ph = self._begin()
            model, result, error = self._io(ph.ping, port, servo_id)
            self._check(result, error, servo_id, "ping")
            return int(model)

    def read(self, servo_id: int, reg: Register) -> int:
        """Read one register of one servo (unsigned; decode sign-magnitude registers yourself).

        Raises: like :meth:`ping`.
        """
        with self._lock:
            port, ph = self._begin()
            data, result, error = self._io(ph.readTxRx, port, servo_id, reg.address, reg.size)
            self._check(result, error, servo_id, f"read of address {reg.address}")
            return _word(data)

    def write(self, servo_id: int, reg: Register, value: int) -> None:
        """Write one register of one servo and wait for its acknowledgement.

        Raises: like :meth:`ping`; ValueError for a value that does not fit the register.
        """
        data = _bytes(reg, value)
        with self._lock:
            port, ph = self._begin()
            result, error = self._io(ph.writeTxRx, port, servo_id, reg.address, reg.size, data)
            self._check(result, error, servo_id, f"write of address {reg.address}")

    def sync_read(self, reg: Register, ids: Sequence[int], size: int | None = None) -> dict[int, list[int]]:
        """One sync-read instruction for ``size`` bytes (default ``reg.size``) from ``reg.address`` of every
        servo in ``ids``; returns the raw bytes per id.

        Raises:
            RobotTimeoutError: names the first servo (in ``ids`` order) whose answer did not come.
            RobotFault: a checksum error or error flags, naming that servo and flag.
            RobotConnectionError: the port is closed or lost.
        """
        size = reg.size if size is None else size
        with self._lock:
            port, ph = self._begin()
            result = self._io(ph.syncReadTx, port, reg.address, size, list(ids), len(ids))
            self._check_tx(result, "sync read")
            out = {}
            for servo_id in ids:
                data, result, error = self._io(ph.readRx, port, servo_id, size)
                self._check(result, error, servo_id, f"sync read of address {reg.address}")
                out[servo_id] = list(data)
            return out

    def sync_read_words(self, reg: Register, ids: Sequence[int]) -> dict[int, int]:
        """:meth:`sync_read` of one register, decoded to unsigned ints per id."""
        return {i: _word(d) for i, d in self.sync_read(reg, ids).items()}

    def sync_write(self, reg: Register, values: dict[int, int]) -> None:
        """One sync-write instruction setting ``reg`` of every servo in ``values`` (id -> value); no answer
        comes back, so a servo that missed it is only seen on the next read.

        Raises:
            RobotConnectionError: the port is closed or lost.
            ValueError: a value that does not fit the register.
        """
        param = []
        for servo_id, value in values.items():
            param += [servo_id, *_bytes(reg, value)]
        with self._lock:
            port, ph = self._begin()
            result = self._io(ph.syncWriteTxOnly, port, reg.address, reg.size, param, len(param))
            self._check_tx(result, "sync write")

    def set_torque(self, ids: Iterable[int], enable: bool) -> None:
        """Enable (servo holds Goal_Position) or disable (limp) the torque of ``ids``, each acknowledged.

        Raises: like :meth:`write`.
        """
        for servo_id in ids:
            self.write(servo_id, TORQUE_ENABLE, int(bool(enable)))


def _port_class(sdk, serial, timeout_s: float | None) -> type:
    """The SDK's ``PortHandler`` with three changes: the port is opened with an exclusive lock (``flock``);
    a status packet times out after ``timeout_s`` plus its transmit time when ``timeout_s`` is set; and a
    read waits in ``select()`` for bytes instead of spinning (which held a CPU core and the GIL)."""

    class _Port(sdk.PortHandler):
        def setupPort(self, cflag_baud):  # noqa: N802  (SDK method names)
            self.ser = serial.Serial(port=self.port_name, baudrate=self.baudrate, timeout=0, exclusive=True)
            self.is_open = True
            self.ser.reset_input_buffer()
            self.tx_time_per_byte = (1000.0 / self.baudrate) * 10.0
            return True

        def setPacketTimeout(self, packet_length):  # noqa: N802
            if timeout_s is None:
                return super().setPacketTimeout(packet_length)
            self.packet_start_time = self.getCurrentTime()
            self.packet_timeout = self.tx_time_per_byte * packet_length + 1000.0 * timeout_s

        def readPort(self, length):  # noqa: N802
            if hasattr(self.ser, "fileno") and self.ser.in_waiting == 0:
                left_ms = self.packet_timeout - self.getTimeSinceStart()
                if left_ms > 0:
                    select.select([self.ser.fileno()], [], [], left_ms / 1000.0)
            return self.ser.read(length)

    return _Port


def _word(data: list[int]) -> int:
    return sum(int(b) << (8 * i) for i, b in enumerate(data))


def _bytes(reg: Register, value: int) -> list[int]:
    value = int(value)
    if not 0 <= value < 1 << (8 * reg.size):
        raise ValueError(f"value {value} does not fit register at address {reg.address} ({reg.size} bytes)")
    return [(value >> (8 * i)) & 0xFF for i in range(reg.size)]


def _why(e: BaseException) -> str:
    text = str(e)
    if "exclusively lock" in text or "Resource temporarily unavailable" in text:
        return f"busy: another program holds it ({text})"
    if "No such file" in text:
        return f"no such device (is the arm plugged in and powered? {text})"
    return text or type(e).__name__
