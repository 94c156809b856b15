"""fabric_core.io"""
