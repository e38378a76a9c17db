"""The record format parse writes and prof reads (docs/records.md): its version, in one place.

A record carries `"v": VERSION`. The version goes up when keys are added or change meaning; prof
reads records of its own version and older, and analyses newer ones as far as it knows them,
with a warning that names both versions. (Not `pyprof/records.py`: that name is the
notebook function `pyprof.records`, which a submodule of the same name would hide.)
"""
VERSION = 1
