"""Fault injection for tests: failpoints, a controllable TCP proxy, and crash simulation.

Import the submodules directly (``raftlog.faults.failpoints``); this package
imports nothing so that engine code importing failpoints pulls in no asyncio
or aiohttp machinery.
"""
