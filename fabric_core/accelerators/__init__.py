"""fabric_core.accelerators"""
