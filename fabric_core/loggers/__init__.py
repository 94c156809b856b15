"""fabric_core.loggers"""
