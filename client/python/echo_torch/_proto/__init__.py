"""Holds echo_v1.binpb, the echo.v1 FileDescriptorSet written by the build."""
