"""fabric_core.strategies"""
