"""Importers and exporters between LeRobot datasets and other demonstration formats (diffusion-policy zarr,
robomimic and ALOHA HDF5)."""
