"""fabric_core.precision"""
