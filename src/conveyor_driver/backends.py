"""Pick the belt's backend: the simulated world's belt, a drive on RS-485 (Modbus) or a relay on an arm-controller
digital output (the one factory), and the device parameters each takes."""

from __future__ import annotations

from conveyor_driver import io_backend, modbus_backend
from conveyor_driver.driver import ConveyorBackend, ConveyorError
from libero_workcell.node_params import prefixed

MODBUS_PARAMS = modbus_backend.ConveyorModbusConfig.parameter_defaults()
IO_PARAMS = io_backend.ConveyorIoConfig.parameter_defaults()
BACKENDS = ("modbus", "io")  # a drive on RS-485, or a relay on an arm-controller digital output
# every generated parameter, for docs and checks
CONFIG_PARAMS = prefixed("modbus", MODBUS_PARAMS) | prefixed("io", IO_PARAMS)


def make_backend(use_sim: bool, sim_link: str, backend: str, modbus: dict, io: dict) -> ConveyorBackend:
    """The backend the node's parameters ask for (real backends connect here)."""
    if use_sim:
        from conveyor_driver.sim_backend import SimConveyorBackend
        from transports.sim_link import SimLink

        return SimConveyorBackend(SimLink.attach(sim_link))
    if backend == "modbus":
        return modbus_backend.ModbusConveyorBackend(modbus_backend.ConveyorModbusConfig.from_mapping(modbus))
    if backend == "io":
        return io_backend.IoConveyorBackend(io_backend.ConveyorIoConfig.from_mapping(io))
    raise ConveyorError(f"backend must be one of {BACKENDS}, got {backend!r}")
