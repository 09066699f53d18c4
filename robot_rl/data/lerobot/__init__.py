"""The LeRobot dataset format: layout, reader (v3.0 and v2.1), writer (v3.0), video codecs, validation,
episode copy and dataset operations (merge, split, filter, columns), inspection and visualisation."""
