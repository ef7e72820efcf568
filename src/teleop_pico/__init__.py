"""PICO teleoperation: controller sources (the headset through xrobotoolkit-sdk, scripted session files),
the headset-to-base mapping, the clutch and buttons, and the tracking law's 7-D action (teleop_pico.core)."""
