"""fabric_core.utilities"""
